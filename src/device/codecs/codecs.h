// The device codecs, one file each (src/device/codecs/<name>.cc), and what they share.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gradcomp/device/codec.h"
#include "gradcomp/registry.h"

namespace gradcomp::device {

// A codec's parameters as its canonical spec spells them ("format" -> "bf16").
class SpecParams {
 public:
  explicit SpecParams(const Codec& codec);
  const std::string& text(std::string_view key) const;  // InvalidArgument if absent
  double number(std::string_view key) const;
  std::int64_t integer(std::string_view key) const;

 private:
  SpecNode node_;
};

// Throws InvalidArgument unless t is a contiguous 1-D float32 tensor (`what` names the call).
void check_floats(const at::Tensor& t, const char* what);
// Throws InvalidArgument unless payload is a contiguous 1-D uint8 tensor on `device`.
void check_payload(const at::Tensor& payload, const at::Device& device, const char* what);
// The payload where ATen can view its fields as 4- and 8-byte values (codec.cc): itself, or
// a copy where it does not start on an 8-byte boundary (payloads gathered back to back).
at::Tensor aligned_payload(const at::Tensor& payload);
// Whether work over many tensors is batched on `device` (one operation for all, where one
// at a time costs a launch and a host sync each): on CUDA by default, where that is the
// cost; not on the CPU, where a batch's large temporaries cost more (docs/measurements/
// gpu.md). GRADCOMP_DEVICE_BATCH=1 in the environment batches CPU tensors too (the tests
// hold batches to the one-at-a-time path), =0 turns batches off on CUDA (the comparison a
// GPU run times). Read when a reducer or codec is built (batch_override: nullopt when unset).
std::optional<bool> batch_override();
bool batches_on(const at::Device& device, std::optional<bool> override = batch_override());
// A host vector as an int64 tensor on `device`: from pinned memory, without a sync, to a GPU.
at::Tensor longs_to_device(const std::vector<std::int64_t>& v, const at::Device& device);
// Payloads back to back as a batch's result (the one payload itself, uncopied); `like`
// gives an empty batch its device.
DeviceCodec::EncodedBatch joined(std::vector<at::Tensor> payloads, const at::Tensor& like);
// Throws CorruptMessage (naming `op` and n) unless the payload has `expected` bytes.
void expect_payload_size(const at::Tensor& payload, std::int64_t expected, const std::string& op,
                         std::int64_t n);

// The 1- and 2-bit layouts (bits.cc, src/core/detail/bitpack.h): pack1 writes the bits
// (bool or uint8 0/1) of n values, pack2 their 2-bit codes (uint8 0..3), into out: a
// contiguous uint8 tensor of packed1_bytes(n) resp. packed2_bytes(n), padding zeroed.
// unpack1 / unpack2 return every code of a packed tensor (uint8, padding included).
void pack1(const at::Tensor& bits, const at::Tensor& out);
void pack2(const at::Tensor& codes, const at::Tensor& out);
at::Tensor unpack1(const at::Tensor& packed);
at::Tensor unpack2(const at::Tensor& packed);
// The b-bit streams (bits.cc, src/core/detail/bitstream.h; b in [1, 8]): pack_stream writes
// n codes (uint8 < 2^b) into out, a contiguous uint8 tensor of packed_bytes(n, b), padding
// zeroed. unpack_stream_bits returns every bit of a packed stream in stream order (uint8
// 0/1, padding included); stream_codes the first n codes of such bits (uint8).
void pack_stream(const at::Tensor& codes, std::int64_t bits, const at::Tensor& out);
// The two halves of pack_stream: code_stream_bits gives the n * b bits of n codes in stream
// order (uint8 0/1), pack_stream_bits packs such bits (padding included: out's length in
// bits, zero after them) into out.
at::Tensor code_stream_bits(const at::Tensor& codes, std::int64_t bits);
void pack_stream_bits(const at::Tensor& stream_bits, const at::Tensor& out);
at::Tensor unpack_stream_bits(const at::Tensor& packed);
at::Tensor stream_codes(const at::Tensor& stream_bits, std::int64_t n, std::int64_t bits);

// The CPU codecs' sums of |x| (abs_sums.cc). segment_abs_sums: detail::abs_sum over each
// run of `segment` values of x (the last may be shorter), as a double tensor on x's
// device, bit for bit. abs_sample_index: the positions of detail::sampled_abs_sum's
// sample of n values (a CPU int64 tensor). sampled_abs_sum: that sum from the sample's
// values, once they are on the host.
at::Tensor segment_abs_sums(const at::Tensor& x, std::int64_t segment);
at::Tensor abs_sample_index(std::int64_t n);
double sampled_abs_sum(const float* sample);

// top-k's selection and payload (topk.cc), which DGC's memory on the device (src/device/dgc.cc)
// runs on its accumulator. select_topk: the indices of x (contiguous 1-D float32) that the
// CPU's kernels::select_topk_sampled (sampled; `sample` the fraction sampled, the draws
// CounterRng::for_step(ctx, RngScope::kPerRank)'s) or select_topk_exact selects for k,
// ascending, as int64 on x's device; a non-finite entry throws InvalidArgument "<op>:
// non-finite value at index i" as the CPU's does. sparse_fp32_payload: write_sparse's
// payload (detail/sparse_message.h, fp32 values) for ascending indices idx and their values.
at::Tensor select_topk(const at::Tensor& x, std::int64_t k, bool sampled, double sample,
                       const StepContext& ctx, const char* op);
at::Tensor sparse_fp32_payload(const at::Tensor& idx, const at::Tensor& vals);

// One factory per device codec (the CPU codec's name in a comment beside it).
std::unique_ptr<DeviceCodec> make_fp16(const Codec& codec, const SpecParams& params);  // fp16
std::unique_ptr<DeviceCodec> make_topk(const Codec& codec, const SpecParams& params);  // topk
std::unique_ptr<DeviceCodec> make_threshold_2bit(const Codec& codec,
                                                 const SpecParams& params);              // 2bit
std::unique_ptr<DeviceCodec> make_onebit(const Codec& codec, const SpecParams& params);  // 1bit
std::unique_ptr<DeviceCodec> make_signsgd(const Codec& codec,
                                          const SpecParams& params);                     // signsgd
std::unique_ptr<DeviceCodec> make_efsign(const Codec& codec, const SpecParams& params);  // efsign
std::unique_ptr<DeviceCodec> make_int(const Codec& codec, const SpecParams& params);     // int

}  // namespace gradcomp::device
