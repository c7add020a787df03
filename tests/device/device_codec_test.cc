// The device codecs (gradcomp/device/codec.h) against the CPU codecs they mirror, on CPU
// tensors (CI has no GPU; tests/python/test_device_codec.py runs the same checks on CUDA
// where there is one): messages byte for byte, residuals bit for bit, decode alike, and a
// mutated payload refused by the device exactly when the CPU codec refuses it, with the
// output untouched.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "device/host_buffer.h"
#include "device_test_support.h"
#include "gradcomp/device/codec.h"
#include "gradcomp/error.h"
#include "gradcomp/registry.h"
#include "gradcomp/wire.h"

namespace gradcomp::device {
namespace {

// Every device codec with its parameter variants.
const std::vector<std::string> kSpecs = {
    "fp16",
    "fp16:format=bf16",
    "topk",
    "topk:select=exact",
    "topk:select=sampled",
    "topk:ratio=0.001,select=sampled",
    "topk:ratio=0.5,select=exact",
    "topk:ratio=0.07,select=exact",
    "topk:ratio=1,select=exact",
    "topk:ratio=1,select=sampled",
    "topk:values=fp16",
    "topk:ratio=0.02,select=sampled,values=fp16",
    "topk:ratio=0.05,select=sampled,sample=0.1",
    "2bit",  // adaptive, scale 2
    "2bit:scale=1",
    "2bit:threshold=0.5",    // fixed (MXNet's)
    "2bit:threshold=0.001",  // fixed, near the gradients' scale
    "1bit",
    "1bit:threshold=0.005",
    "1bit:threshold=-0.5",
    "signsgd",
    "efsign",
    "efsign:block=32",
    "efsign:block=4096",
    "efsign:block=131072",  // a block of two of the sum's blocks
    "int",                  // 4 bits, blocks of 64
    "int:bits=8,block=256",
    "int:bits=2,block=7",
    "int:bits=3,block=1",
    "int:bits=5,block=100000",  // blocks longer than most inputs
};

const std::vector<std::int64_t> kSizes = {0, 1, 2, 3, 17, 1000, 4097, 65537, 300007};

// A gradient with a few large entries (saturation, thresholds) and exact zeros.
at::Tensor gradient(std::int64_t n, std::uint64_t seed) {
  at::Tensor g = at::randn({n}, at::TensorOptions().dtype(at::kFloat)) * 0.01;
  std::mt19937_64 rng(seed);
  for (std::int64_t i = 0; i < n; i += 97) g[i] = (rng() % 2 ? 1.0f : -1.0f) * 1e5f;
  for (std::int64_t i = 5; i < n; i += 101) g[i] = 0.0f;
  return g;
}

using test::floats;
using test::same_bits;

StepContext context(std::uint64_t step) {
  StepContext ctx;
  ctx.seed = 42;
  ctx.step = step;
  return ctx;
}

class DeviceCodecTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    at::manual_seed(7);
    codec_ = builtin_registry().make_codec(GetParam());
    device_ = make_device_codec(*codec_);
    ASSERT_NE(device_, nullptr) << GetParam();
  }
  std::vector<std::byte> cpu_message(const at::Tensor& g, const StepContext& ctx) const {
    std::vector<std::byte> msg(codec_->max_encoded_bytes(g.numel()));
    msg.resize(codec_->encode(floats(g), ctx, msg));
    return msg;
  }
  std::shared_ptr<const Codec> codec_;
  std::unique_ptr<DeviceCodec> device_;
};

TEST_P(DeviceCodecTest, EncodeWritesTheCpuMessage) {
  for (const std::int64_t n : kSizes) {
    const at::Tensor g = gradient(n, n);
    const StepContext ctx = context(3);
    const at::Tensor payload = device_->encode_payload(g, ctx);
    EXPECT_EQ(frame_message(*codec_, n, payload.cpu()), cpu_message(g, ctx)) << "n=" << n;
  }
}

TEST_P(DeviceCodecTest, ResidualStepMatchesTheCpuCodec) {
  for (const std::int64_t n : kSizes) {
    at::Tensor e_cpu = gradient(n, n + 1) * 0.5;
    at::Tensor e_dev = e_cpu.clone();
    for (std::uint64_t step = 0; step < 3; ++step) {  // the residual carries over
      const at::Tensor g = gradient(n, 100 * step + n);
      const StepContext ctx = context(step);
      std::vector<std::byte> msg(codec_->max_encoded_bytes(n));
      msg.resize(codec_->encode_with_residual(ResidualUpdate(floats(g)), floats(e_cpu), ctx, msg));
      const at::Tensor payload = device_->encode_payload_with_residual(g, e_dev, ctx);
      ASSERT_EQ(frame_message(*codec_, n, payload.cpu()), msg) << "n=" << n << " step=" << step;
      ASSERT_TRUE(same_bits(e_dev, e_cpu)) << "n=" << n << " step=" << step;
    }
  }
}

TEST_P(DeviceCodecTest, DecodeAddsWhatTheCpuCodecAdds) {
  for (const std::int64_t n : kSizes) {
    const std::vector<std::byte> msg = cpu_message(gradient(n, n + 2), context(1));
    at::Tensor out_cpu = at::randn({n});
    at::Tensor out_dev = out_cpu.clone();
    codec_->decode_add(msg, floats(out_cpu), 0.25f);
    device_->decode_payload_add(open_message(msg, *codec_, n), out_dev, 0.25f);
    EXPECT_TRUE(same_bits(out_dev, out_cpu)) << "n=" << n;
  }
}

// Random payload mutations (bytes overwritten, resealed so the header passes): the device
// refuses a payload exactly when the CPU codec does, leaving out untouched, and otherwise
// adds what the CPU codec adds. A truncated payload is always refused.
TEST_P(DeviceCodecTest, MutatedPayloadsRefusedAsTheCpuCodecRefusesThem) {
  const std::int64_t n = 257;
  const std::vector<std::byte> clean = cpu_message(gradient(n, 9), context(2));
  std::mt19937_64 rng(11);
  int refused = 0;
  for (int trial = 0; trial < 300 && clean.size() > kHeaderBytes; ++trial) {
    std::vector<std::byte> msg = clean;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      msg[kHeaderBytes + rng() % (msg.size() - kHeaderBytes)] = static_cast<std::byte>(rng());
    }
    reseal_message(msg);
    at::Tensor out_cpu = at::randn({n});
    at::Tensor out_dev = out_cpu.clone();
    const at::Tensor before = out_dev.clone();
    bool cpu_refused = false;
    try {
      codec_->decode_add(msg, floats(out_cpu), 1.0f);
    } catch (const CorruptMessage&) {
      cpu_refused = true;
    }
    bool dev_refused = false;
    try {
      device_->decode_payload_add(open_message(msg, *codec_, n), out_dev, 1.0f);
    } catch (const CorruptMessage&) {
      dev_refused = true;
    }
    ASSERT_EQ(dev_refused, cpu_refused) << "trial " << trial;
    ASSERT_TRUE(same_bits(out_dev, dev_refused ? before : out_cpu)) << "trial " << trial;
    refused += dev_refused;
  }
  const at::Tensor payload = open_message(clean, *codec_, n);
  at::Tensor out = at::zeros({n});
  EXPECT_THROW(device_->decode_payload_add(payload.narrow(0, 0, payload.numel() - 1), out, 1.0f),
               CorruptMessage);
  EXPECT_TRUE(out.eq(0).all().item<bool>());
  RecordProperty("refused", refused);
}

TEST_P(DeviceCodecTest, NonFiniteGradientRefusedAsTheCpuCodecRefusesIt) {
  at::Tensor g = gradient(100, 3);
  g[42] = std::numeric_limits<float>::quiet_NaN();
  bool cpu_threw = false;
  try {
    cpu_message(g, context(0));
  } catch (const InvalidArgument&) {
    cpu_threw = true;
  }
  if (cpu_threw) {
    EXPECT_THROW(device_->encode_payload(g, context(0)), InvalidArgument);
  }
}

// Inputs the random gradients miss: all zeros (adaptive tau 0), values exactly at and
// one ulp either side of the thresholds, negative zeros (kept by p + (-0)), and sizes
// past the sampled tau's threshold and across the sums' 65,536-value blocks.
TEST_P(DeviceCodecTest, EdgeInputsMatchTheCpuCodec) {
  std::vector<at::Tensor> inputs = {at::zeros({33}), at::full({40}, -0.0f)};
  std::vector<float> edge;
  for (const float t : {0.5f, 0.005f, 0.001f, -0.5f, 0.0f}) {
    for (const float v : {t, -t, std::nextafter(t, 1.0f), std::nextafter(t, -1.0f)}) {
      edge.push_back(v);
      edge.push_back(-v);
    }
  }
  inputs.push_back(at::tensor(edge));
  for (const std::int64_t n : {(std::int64_t{1} << 20) + 17, std::int64_t{3} * 65536 + 5}) {
    inputs.push_back(gradient(n, 5));
  }
  for (const at::Tensor& g : inputs) {
    const std::int64_t n = g.numel();
    const StepContext ctx = context(1);
    EXPECT_EQ(frame_message(*codec_, n, device_->encode_payload(g, ctx).cpu()), cpu_message(g, ctx))
        << "n=" << n;
    at::Tensor e_cpu = g.clone();
    at::Tensor e_dev = g.clone();
    std::vector<std::byte> msg(codec_->max_encoded_bytes(n));
    msg.resize(codec_->encode_with_residual(ResidualUpdate(floats(g)), floats(e_cpu), ctx, msg));
    EXPECT_EQ(frame_message(*codec_, n, device_->encode_payload_with_residual(g, e_dev, ctx).cpu()),
              msg)
        << "n=" << n;
    EXPECT_TRUE(same_bits(e_dev, e_cpu)) << "n=" << n;
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, DeviceCodecTest, ::testing::ValuesIn(kSpecs),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           std::string name;
                           for (const char c : param_info.param) name += std::isalnum(c) ? c : '_';
                           return name;
                         });

TEST(DeviceCodecs, OneForEachNamedCodec) {
  for (const std::string& name : device_codec_names()) {
    const auto codec = builtin_registry().make_codec(name);
    EXPECT_NE(make_device_codec(*codec), nullptr) << name;
  }
  EXPECT_EQ(make_device_codec(*builtin_registry().make_codec("qsgd")), nullptr);
}

TEST(DeviceCodecs, FrameRefusesANonCpuOrNonBytePayload) {
  const auto codec = builtin_registry().make_codec("fp16");
  EXPECT_THROW(frame_message(*codec, 2, at::zeros({4})), InvalidArgument);
}

// ---- HostBuffer (src/device/host_buffer.h): what the device reducers copy through, reused
// across steps and grown by half again; plain memory for a CPU device. (In this unit to
// spare the build one more parse of ATen.)

TEST(HostBuffer, IsReusedKeepsItsContentsAndGrowsByHalf) {
  HostBuffer b(at::kFloat, at::Device(at::kCPU));
  EXPECT_FALSE(b.pinned());
  EXPECT_EQ(b.take(0).numel(), 0);
  at::Tensor t = b.take(100);
  EXPECT_EQ(t.numel(), 100);
  EXPECT_EQ(t.scalar_type(), at::kFloat);
  EXPECT_TRUE(t.is_cpu());
  t.fill_(3.0f);
  const std::size_t first = b.allocations();
  EXPECT_TRUE(b.take(60).eq(3.0f).all().item<bool>());  // smaller: the same memory
  EXPECT_EQ(b.take(100).data_ptr(), t.data_ptr());
  EXPECT_EQ(b.allocations(), first);
  b.take(120);  // larger: reallocated, to 150
  EXPECT_EQ(b.allocations(), first + 1);
  b.take(150);
  EXPECT_EQ(b.allocations(), first + 1);
  b.take(1000);  // past half again: exactly what is asked
  b.take(1000);
  EXPECT_EQ(b.allocations(), first + 2);
  HostBuffer bytes(at::kByte, at::Device(at::kCPU));
  EXPECT_EQ(bytes.take(7).scalar_type(), at::kByte);
}

}  // namespace
}  // namespace gradcomp::device
