// Helpers shared by the core tests: deterministic inputs, guarded buffers, and the
// list of every registered codec spec (defaults plus each codec's examples).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "gradcomp/codec.h"
#include "gradcomp/registry.h"

namespace gradcomp::test {

// Sizes every codec is swept over: 0, 1, odd sizes, and both sides of every packing
// boundary (8/16/32 values per byte/word, SIMD widths).
inline const std::vector<std::size_t> kSweepSizes = {0,  1,  2,  3,  7,  15,   16,
                                                     17, 31, 33, 64, 65, 1000, 65539};

// Gaussian-ish values (sum of uniforms), deterministic in (seed, n).
std::vector<float> random_gradient(std::size_t n, std::uint64_t seed, float scale = 1.0f);
// Integer-valued floats in [-range, range], for exact conservation tests.
std::vector<float> integer_gradient(std::size_t n, std::uint64_t seed, int range);

// Every codec spec the contract tests sweep: each registered codec's defaults, then
// its examples.
std::vector<std::string> all_codec_specs();

// A buffer with `guard` sentinel elements after `size` usable ones.
template <class T>
class Guarded {
 public:
  Guarded(std::size_t size, T sentinel, std::size_t guard = 64)
      : size_(size), sentinel_(sentinel), data_(size + guard, sentinel) {}
  std::span<T> span() { return {data_.data(), size_}; }
  T* data() { return data_.data(); }
  bool guard_intact() const {
    for (std::size_t i = size_; i < data_.size(); ++i) {
      if (std::memcmp(&data_[i], &sentinel_, sizeof(T)) != 0) return false;
    }
    return true;
  }

 private:
  std::size_t size_;
  T sentinel_;
  std::vector<T> data_;
};

// Encodes `in` with `codec` into a fresh, exactly sized message.
std::vector<std::byte> encode(const Codec& codec, std::span<const float> in,
                              const StepContext& ctx = {});
// decode of a message into n zeros.
std::vector<float> decode(const Codec& codec, std::span<const std::byte> msg, std::size_t n);

// Bytes from a list of ints (hand-written expected messages).
std::vector<std::byte> bytes_of(std::initializer_list<int> v);
// The payload of a message (everything after the header).
std::vector<std::byte> payload_of(const std::vector<std::byte>& msg);
// Bitwise equality of float arrays (tells -0 from +0 and compares NaN payloads).
bool same_bits(std::span<const float> a, std::span<const float> b);

// Readable name for a parameterised test from a spec string.
std::string spec_test_name(const std::string& spec);

}  // namespace gradcomp::test
