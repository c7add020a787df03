// The host side of a replica whose parameters live on a device (a GPU) or in 16 bits: the
// outer loop (gradcomp/dist/outer_loop.h) reads and writes float32 host spans, once per
// round, and this class gives it one span per parameter and copies the parameters it names
// into them before a read and back after a write (dist::ReplicaStaging). A round then moves
// each parameter of its fragment across PCIe once each way: every H inner steps, not every
// step. A bfloat16 or float16 replica is widened on its way in (exactly) and rounded to
// nearest on its way out: the global weights, the outer momentum and the pseudo-gradients
// stay float32, as DiLoCo keeps its outer copy in full precision.
// The LibTorch gradcomp::DiLoCo and Python's gradcomp.torch.DiLoCo both run their
// parameters through it.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gradcomp/dist/outer_loop.h"

namespace gradcomp::device {

class ParameterStaging final : public dist::ReplicaStaging {
 public:
  // params (name, tensor): contiguous float32, bfloat16 or float16 tensors. A float32 one
  // on the CPU is its own span (nothing is copied); any other gets a float32 host buffer,
  // pinned for CUDA, kept for the object's life. stage_cpu: CPU float32 parameters get
  // buffers and copies too, as a device's do: the check CI (no GPU) runs of this
  // bookkeeping. InvalidArgument, "<who>: parameter <name> ...", for any other tensor.
  ParameterStaging(const std::vector<std::pair<std::string, at::Tensor>>& params,
                   const std::string& who, bool stage_cpu = false);

  // InvalidArgument, "<who>: parameter <name> is no longer the tensor ...", when a tensor
  // given to the constructor now holds other memory: a model moved or converted afterwards
  // (LibTorch's Module::to and Python's .to(), .half() or a .data assignment swap the
  // parameter's storage), whose spans here would be stale. The owners call it before every
  // step and synchronisation.
  void check_unchanged() const;

  // The spans the loop reads and writes, one per parameter, in order.
  std::vector<std::span<float>> spans() const;
  // Whether any parameter is staged (else the loop needs no staging at all).
  bool staged() const { return staged_count_ > 0; }
  // Copies made so far, each way (tests check that a round copies what it touches).
  std::size_t fetches() const { return fetches_; }
  std::size_t publishes() const { return publishes_; }

  void fetch(std::span<const std::size_t> params) override;
  void publish(std::span<const std::size_t> params) override;

 private:
  std::string who_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> given_;   // as given: they follow a swap of their storage
  std::vector<at::Tensor> params_;  // the replica's tensors, as built (detached)
  std::vector<at::Tensor> host_;    // the spans' memory: params_[i] itself, or its buffer
  std::vector<char> staged_;
  std::size_t staged_count_ = 0;
  std::size_t fetches_ = 0;
  std::size_t publishes_ = 0;
};

}  // namespace gradcomp::device
