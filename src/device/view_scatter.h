// Consecutive slices of one tensor written into many views: the dense tensors' means back
// into their slots of a DDP bucket (ResNet-50: 119 of them, a copy and a launch each).
// Internal to gradcomp_device.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <span>
#include <vector>

namespace gradcomp::device {

class ViewScatter {
 public:
  // views[i] = flat's i-th slice of views[i].numel() values (flat holds their sum). Views
  // that are contiguous slices of one tensor take one indexed copy, its positions kept on
  // the device while the views keep their places; others a copy each.
  void operator()(std::span<const at::Tensor> views, const at::Tensor& flat);

 private:
  std::vector<std::int64_t> offsets_;  // the views' storage offsets the positions are for
  std::vector<std::int64_t> sizes_;
  at::Tensor positions_;  // every view element's place after the lowest offset, in order
};

}  // namespace gradcomp::device
