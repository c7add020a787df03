// What the device codec tests share: tensors as the CPU codecs' spans, bitwise equality,
// a codec on both sides, a state compared with the host's, test names from specs.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gradcomp/codec.h"
#include "gradcomp/device/codec.h"
#include "gradcomp/reducer.h"
#include "gradcomp/registry.h"

namespace gradcomp::device::test {

// A CPU float32 tensor's data as the span the CPU codecs take (written through).
inline std::span<float> floats(const at::Tensor& t) {
  return {t.data_ptr<float>(), static_cast<std::size_t>(t.numel())};
}

// The same floats bit for bit (NaN patterns and signed zeros included).
inline bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.numel() == b.numel() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), static_cast<std::size_t>(a.numel()) * 4) == 0;
}

// A built-in codec and its device codec, from one spec.
struct CodecPair {
  std::shared_ptr<const Codec> cpu;
  std::unique_ptr<DeviceCodec> dev;
};
inline CodecPair make_codec_pair(const std::string& spec) {
  CodecPair p{builtin_registry().make_codec(spec), nullptr};
  p.dev = make_device_codec(*p.cpu);
  return p;
}

// A device state (name, tensor) against the host's: its names in its order, its values
// bit for bit.
inline void expect_same_state(const std::vector<StateBuffer>& host,
                              const std::vector<std::pair<std::string, at::Tensor>>& dev,
                              const std::string& where) {
  ASSERT_EQ(host.size(), dev.size()) << where;
  for (std::size_t i = 0; i < host.size(); ++i) {
    ASSERT_EQ(host[i].name, dev[i].first) << where;
    EXPECT_TRUE(same_bits(dev[i].second,
                          at::tensor(std::vector<float>(host[i].data.begin(), host[i].data.end()))))
        << where << ": " << host[i].name;
  }
}

// A spec as a test's name: every character but letters and digits an underscore.
inline std::string name_of(const std::string& spec) {
  std::string name = spec;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

}  // namespace gradcomp::device::test
