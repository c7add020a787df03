// ViewScatter (view_scatter.h).
#include "device/view_scatter.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>
#include <utility>

namespace gradcomp::device {

void ViewScatter::operator()(std::span<const at::Tensor> views, const at::Tensor& flat) {
  if (views.empty()) return;
  bool one_tensor = views.size() > 1;
  std::vector<std::int64_t> offsets;
  std::vector<std::int64_t> sizes;
  std::int64_t lo = std::numeric_limits<std::int64_t>::max();
  std::int64_t hi = 0;
  for (const at::Tensor& v : views) {
    one_tensor = one_tensor && v.is_contiguous() && v.is_alias_of(views.front());
    offsets.push_back(v.storage_offset());
    sizes.push_back(v.numel());
    lo = std::min(lo, v.storage_offset());
    hi = std::max(hi, v.storage_offset() + v.numel());
  }
  if (!one_tensor) {
    std::int64_t at = 0;
    for (const at::Tensor& v : views) {
      v.copy_(flat.narrow(0, at, v.numel()));
      at += v.numel();
    }
    return;
  }
  if (offsets != offsets_ || sizes != sizes_ || positions_.device() != flat.device()) {
    std::vector<std::int64_t> places;
    for (std::size_t i = 0; i < views.size(); ++i) {
      for (std::int64_t j = 0; j < sizes[i]; ++j) places.push_back(offsets[i] - lo + j);
    }
    positions_ = at::tensor(places, at::TensorOptions().dtype(at::kLong)).to(flat.device());
    offsets_ = std::move(offsets);
    sizes_ = std::move(sizes);
  }
  views.front().as_strided({hi - lo}, {1}, lo).index_copy_(0, positions_, flat);
}

}  // namespace gradcomp::device
