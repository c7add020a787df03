// The shape of every device codec but top-k: a decode that reads a few values to check a
// payload (a flag, a threshold), decides on the host, then adds. Split in those three, so
// that a batch (DeviceCodec::decode_batch) reads every payload's values in one transfer: one
// host sync for all the step's messages instead of one each (a DDP bucket of ResNet-50 holds
// dozens of tensors, and each sync waits for the GPU's queue to drain).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <span>
#include <vector>

#include "codecs.h"
#include "gradcomp/device/codec.h"

namespace gradcomp::device {

class CheckedDecodeCodec : public DeviceCodec {
 public:
  using DeviceCodec::DeviceCodec;
  bool batches() const override { return true; }

 protected:
  // The payload's length for n values (the host checks it first: CorruptMessage otherwise).
  virtual std::int64_t payload_bytes(std::int64_t n) const = 0;
  // How many floats report() gives a payload.
  virtual std::int64_t report_size() const = 0;
  // The values the host needs to check payload i (payloads.narrow(0, offsets[i], bytes[i]),
  // its length checked, for ns[i] values; each[i] the same bytes aligned for dtype views:
  // aligned_payload) and to add it: float [offsets.size(), report_size()] on the payloads'
  // device. Launches only, never a sync.
  virtual at::Tensor reports(const at::Tensor& payloads, std::span<const std::int64_t> offsets,
                             std::span<const std::int64_t> bytes, std::span<const std::int64_t> ns,
                             std::span<const at::Tensor> each) const = 0;
  // Throws CorruptMessage in the CPU codec's words where `report` refuses the payload (the
  // error path may sync again, to name the element).
  virtual void check(const at::Tensor& payload, std::int64_t n, const float* report) const = 0;
  // out += alpha * decode(payload), for a payload check() accepted.
  virtual void add_checked(const at::Tensor& payload, const at::Tensor& out, float alpha,
                           const float* report) const = 0;

  // Every payload of a batch that check() accepted, added: outs[s] = the sum over r = 0,
  // 1, ..., in rank order, of alpha * decode(payload[r * S + s]) (S = outs.size(), ns[i]
  // payload i's values, reports its rows). The default zeroes each out and calls
  // add_checked for each rank's payload; a codec may do it for all payloads at once, with
  // the same result bit for bit.
  virtual void add_batch(std::span<const at::Tensor> payload, std::span<const std::int64_t> ns,
                         std::span<const at::Tensor> outs, float alpha, const float* reports) const;

  // Each payload's report from its own small operations (one(each[i], ns[i])), stacked:
  // for codecs whose report reads the payload's fields.
  template <typename OneReport>
  static at::Tensor stack_reports(std::span<const at::Tensor> each,
                                  std::span<const std::int64_t> ns, const OneReport& one) {
    std::vector<at::Tensor> rows;
    for (std::size_t i = 0; i < each.size(); ++i)
      rows.push_back(one(each[i], ns[i]).to(at::kFloat));
    return at::stack(rows);
  }

 private:
  // Length, report (one sync), check, add.
  void decode_add_impl(const at::Tensor& payload, const at::Tensor& out, float alpha) const final;
  // Every length, then every report in one sync, the checks in segment-major order, then
  // the adds, rank after rank into each output.
  void decode_batch_impl(const at::Tensor& payloads, std::span<const std::int64_t> offsets,
                         std::span<const std::int64_t> bytes, std::span<const at::Tensor> outs,
                         float alpha) const final;
};

// The 1- and 2-bit layouts' padding: 1 where the bits after a payload's n codes of `bits`
// bits each (all of them in its last 32-bit word: packed1_bytes / packed2_bytes are whole
// words) are not all zero, else 0; float [offsets.size()] on the payloads' device, from one
// gather. The codes end where the payload ends (lengths checked); n = 0 has none.
at::Tensor padding_dirty(const at::Tensor& payloads, std::span<const std::int64_t> offsets,
                         std::span<const std::int64_t> bytes, std::span<const std::int64_t> ns,
                         int bits);

}  // namespace gradcomp::device
