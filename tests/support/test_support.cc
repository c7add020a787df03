#include "support/test_support.h"

#include <cmath>

#include "gradcomp/rng.h"
#include "gradcomp/wire.h"

namespace gradcomp::test {

std::vector<float> random_gradient(std::size_t n, std::uint64_t seed, float scale) {
  const CounterRng rng(detail::splitmix64(seed ^ (n * 0x9E3779B97F4A7C15ull)));
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i) {
    // Irwin-Hall(4), centred: roughly normal with variance 1/3; a few larger outliers
    // so that selection codecs see a heavy-ish tail.
    const auto k = static_cast<std::uint32_t>(4 * i);
    float v = rng.uniform(k) + rng.uniform(k + 1) + rng.uniform(k + 2) + rng.uniform(k + 3) - 2.0f;
    if ((rng.bits(k + 3) & 63) == 0) v *= 8.0f;
    g[i] = scale * v;
  }
  return g;
}

std::vector<float> integer_gradient(std::size_t n, std::uint64_t seed, int range) {
  const CounterRng rng(detail::splitmix64(seed + 17));
  std::vector<float> g(n);
  const auto span = static_cast<std::uint32_t>(2 * range + 1);
  for (std::size_t i = 0; i < n; ++i) {
    g[i] = static_cast<float>(static_cast<int>(rng.below(static_cast<std::uint32_t>(i), span)) -
                              range);
  }
  return g;
}

std::vector<std::string> all_codec_specs() {
  std::vector<std::string> specs;
  for (const CodecInfo* info : builtin_registry().all()) {
    specs.push_back(info->name);
    for (const auto& e : info->examples) specs.push_back(e);
  }
  return specs;
}

std::vector<std::byte> encode(const Codec& codec, std::span<const float> in,
                              const StepContext& ctx) {
  std::vector<std::byte> msg(codec.max_encoded_bytes(in.size()));
  msg.resize(codec.encode(in, ctx, msg));
  return msg;
}

std::vector<float> decode(const Codec& codec, std::span<const std::byte> msg, std::size_t n) {
  std::vector<float> out(n, 0.0f);
  codec.decode_add(msg, out);
  return out;
}

std::vector<std::byte> bytes_of(std::initializer_list<int> v) {
  std::vector<std::byte> out;
  for (int x : v) out.push_back(static_cast<std::byte>(x));
  return out;
}

std::vector<std::byte> payload_of(const std::vector<std::byte>& msg) {
  return {msg.begin() + static_cast<std::ptrdiff_t>(kHeaderBytes), msg.end()};
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), 4 * a.size()) == 0);
}

std::string spec_test_name(const std::string& spec) {
  std::string out;
  for (char c : spec) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

}  // namespace gradcomp::test
