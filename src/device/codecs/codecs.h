// The device codecs, one file each (src/device/codecs/<name>.cc), and what they share.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <string_view>

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
// Throws CorruptMessage (naming `op` and n) unless the payload has `expected` bytes.
void expect_payload_size(const at::Tensor& payload, std::int64_t expected, const std::string& op,
                         std::int64_t n);

// One factory per device codec (the CPU codec's name in a comment beside it).
std::unique_ptr<DeviceCodec> make_fp16(const Codec& codec, const SpecParams& params);  // fp16
std::unique_ptr<DeviceCodec> make_topk(const Codec& codec, const SpecParams& params);  // topk

}  // namespace gradcomp::device
