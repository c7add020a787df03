// The device topk (src/device/codecs/topk.cc) on the inputs its selection finds hardest,
// against the CPU codec on CPU tensors: ties at the threshold (constant blocks, all equal,
// all zero), k = 1 and k = n, non-finite input (same exception text, the residual left
// holding p), a non-power-of-two decode alpha, and refusals worded as the CPU words them.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "device_test_support.h"
#include "gradcomp/device/codec.h"
#include "gradcomp/error.h"
#include "gradcomp/registry.h"
#include "gradcomp/wire.h"

namespace gradcomp::device {
namespace {

using test::floats;
using test::same_bits;
using Pair = test::CodecPair;
const auto make = test::make_codec_pair;

StepContext context(std::uint64_t step) {
  StepContext ctx;
  ctx.seed = 5;
  ctx.step = step;
  return ctx;
}

// Gradients whose magnitudes tie: lines of 16 equal values over 8 levels (the sample sees
// whole lines), all +-1, all zero, and a few large values over zeros.
std::vector<at::Tensor> tied_gradients(std::int64_t n) {
  const at::Tensor levels = at::randint(0, 8, {(n + 15) / 16}).to(at::kFloat);
  const at::Tensor signs = at::randint(0, 2, {n}).to(at::kFloat).mul(2).sub(1);
  at::Tensor blocks = levels.repeat_interleave(16).narrow(0, 0, n).mul(signs);
  at::Tensor spikes = at::zeros({n});
  for (std::int64_t i = 3; i < n; i += 1009) spikes[i] = static_cast<float>(i % 7) - 3.0f;
  // Heavy-tailed constant lines: the sample holds few independent values, so its threshold
  // is often far off and DGC's corrections (0.8x retries, re-selection) run.
  at::Tensor lines = at::randn({(n + 15) / 16}).mul(3).exp().repeat_interleave(16).narrow(0, 0, n);
  return {blocks, signs, at::zeros({n}), spikes, lines.mul(signs)};
}

const std::vector<std::string> kSpecs = {"topk:select=exact", "topk:select=sampled",
                                         "topk:ratio=0.001,select=exact",
                                         "topk:ratio=0.3,select=sampled,values=fp16"};

TEST(DeviceTopk, TiesAndZerosGiveTheCpuMessageAndResidual) {
  at::manual_seed(3);
  for (const std::string& spec : kSpecs) {
    const Pair c = make(spec);
    for (const std::int64_t n : {std::int64_t{5}, std::int64_t{4099}, std::int64_t{300007}}) {
      for (const at::Tensor& g : tied_gradients(n)) {
        at::Tensor e_cpu = g.mul(0.5);
        at::Tensor e_dev = e_cpu.clone();
        for (std::uint64_t step = 0; step < 4; ++step) {
          std::vector<std::byte> msg(c.cpu->max_encoded_bytes(n));
          msg.resize(c.cpu->encode_with_residual(ResidualUpdate(floats(g)), floats(e_cpu),
                                                 context(step), msg));
          const at::Tensor payload = c.dev->encode_payload_with_residual(g, e_dev, context(step));
          ASSERT_EQ(frame_message(*c.cpu, n, payload), msg) << spec << " n=" << n;
          ASSERT_TRUE(same_bits(e_dev, e_cpu)) << spec << " n=" << n;
        }
      }
    }
  }
}

TEST(DeviceTopk, OneEntryAndAllEntries) {
  at::manual_seed(4);
  for (const std::string spec :
       {"topk:ratio=1e-9,select=exact", "topk:ratio=1e-9,select=sampled",
        "topk:ratio=1,select=exact", "topk:ratio=1,select=sampled,values=fp16"}) {
    const Pair c = make(spec);
    for (const std::int64_t n : {std::int64_t{1}, std::int64_t{16}, std::int64_t{300007}}) {
      const at::Tensor g = at::randn({n});
      std::vector<std::byte> msg(c.cpu->max_encoded_bytes(n));
      msg.resize(c.cpu->encode(floats(g), context(0), msg));
      EXPECT_EQ(frame_message(*c.cpu, n, c.dev->encode_payload(g, context(0))), msg)
          << spec << " n=" << n;
    }
  }
}

TEST(DeviceTopk, NonFiniteInputRefusedWithTheCpuWordsAndTheResidualHoldingP) {
  at::manual_seed(5);
  for (const std::string& spec : kSpecs) {
    const Pair c = make(spec);
    for (const std::int64_t n : {std::int64_t{50}, std::int64_t{300007}}) {
      for (const float bad :
           {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
        at::Tensor g = at::randn({n});
        g[n / 3] = bad;
        g[n / 2] = bad;
        at::Tensor e_cpu = at::randn({n});
        at::Tensor e_dev = e_cpu.clone();
        std::string cpu_what, dev_what;
        std::vector<std::byte> msg(c.cpu->max_encoded_bytes(n));
        try {
          c.cpu->encode_with_residual(ResidualUpdate(floats(g)), floats(e_cpu), context(0), msg);
        } catch (const InvalidArgument& x) {
          cpu_what = x.what();
        }
        try {
          c.dev->encode_payload_with_residual(g, e_dev, context(0));
        } catch (const InvalidArgument& x) {
          dev_what = x.what();
        }
        EXPECT_FALSE(cpu_what.empty()) << spec;
        EXPECT_EQ(dev_what, cpu_what) << spec << " n=" << n;
        EXPECT_TRUE(same_bits(e_dev, e_cpu)) << spec << " n=" << n;
      }
    }
  }
}

TEST(DeviceTopk, DecodeWithAnyAlphaAddsTheCpuFma) {
  at::manual_seed(6);
  for (const std::string& spec : kSpecs) {
    const Pair c = make(spec);
    for (const std::int64_t n : {std::int64_t{37}, std::int64_t{300007}}) {
      std::vector<std::byte> msg(c.cpu->max_encoded_bytes(n));
      msg.resize(c.cpu->encode(floats(at::randn({n})), context(1), msg));
      for (const float alpha : {0.3f, -1.7f, 1e-3f}) {
        at::Tensor out_cpu = at::randn({n});
        at::Tensor out_dev = out_cpu.clone();
        c.cpu->decode_add(msg, floats(out_cpu), alpha);
        c.dev->decode_payload_add(open_message(msg, *c.cpu, n), out_dev, alpha);
        EXPECT_TRUE(same_bits(out_dev, out_cpu)) << spec << " n=" << n << " alpha=" << alpha;
      }
    }
  }
}

// Each kind of refusal, worded as the CPU codec words it, with out untouched.
TEST(DeviceTopk, RefusalsWordedAsTheCpuCodecWordsThem) {
  at::manual_seed(7);
  const std::int64_t n = 1000;
  for (const std::string spec : {"topk:ratio=0.01,select=exact", "topk:ratio=0.01,select=sampled",
                                 "topk:ratio=0.01,select=sampled,values=fp16"}) {
    const Pair c = make(spec);
    std::vector<std::byte> clean(c.cpu->max_encoded_bytes(n));
    clean.resize(c.cpu->encode(floats(at::randn({n})), context(0), clean));
    const std::size_t count =
        (clean.size() - kHeaderBytes - 4) / (spec.find("fp16") != std::string::npos ? 6 : 8);
    const auto at_payload = [&](std::vector<std::byte>& m, std::size_t off) -> std::byte* {
      return m.data() + kHeaderBytes + off;
    };
    std::vector<std::function<void(std::vector<std::byte>&)>> mutations = {
        [&](auto& m) { *at_payload(m, 0) = std::byte{3}; },                        // count field
        [&](auto& m) { std::memset(at_payload(m, 4 + 4 * 4), 0x7F, 4); },          // index >= n
        [&](auto& m) { std::memcpy(at_payload(m, 8), at_payload(m, 4), 4); },      // duplicate
        [&](auto& m) { std::memset(at_payload(m, 4 + 4 * count + 2), 0xFF, 2); },  // NaN
        [&](auto& m) { m.resize(m.size() - 3); },                                  // truncated
        [&](auto& m) { m.resize(kHeaderBytes + 2); },                              // < 4 bytes
    };
    for (std::size_t t = 0; t < mutations.size(); ++t) {
      std::vector<std::byte> msg = clean;
      mutations[t](msg);
      const auto payload_bytes = msg.size() - kHeaderBytes;
      // Reframe: the header's size field must describe the mutated payload.
      write_header(msg, c.cpu->wire_id(), c.cpu->config_tag(), static_cast<std::size_t>(n),
                   payload_bytes);
      std::string cpu_what, dev_what;
      at::Tensor out_cpu = at::randn({n});
      at::Tensor out_dev = out_cpu.clone();
      const at::Tensor before = out_dev.clone();
      try {
        c.cpu->decode_add(msg, floats(out_cpu), 1.0f);
      } catch (const CorruptMessage& x) {
        cpu_what = x.what();
      }
      try {
        c.dev->decode_payload_add(open_message(msg, *c.cpu, n), out_dev, 1.0f);
      } catch (const CorruptMessage& x) {
        dev_what = x.what();
      }
      EXPECT_FALSE(cpu_what.empty()) << spec << " mutation " << t;
      EXPECT_FALSE(dev_what.empty()) << spec << " mutation " << t;
      EXPECT_NE(cpu_what.find(dev_what), std::string::npos)
          << spec << " mutation " << t << ": cpu '" << cpu_what << "' device '" << dev_what << "'";
      EXPECT_TRUE(same_bits(out_dev, before)) << spec << " mutation " << t;
    }
  }
}

}  // namespace
}  // namespace gradcomp::device
