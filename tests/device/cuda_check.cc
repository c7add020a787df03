// The device codecs on a GPU (no CI lane has one; scripts/device_cuda_check.sh builds and
// runs this where there is): every spec against the CPU codec, byte for byte and bit for
// bit, on CUDA tensors, at sizes around the packing words, the sum's blocks and the
// sampled tau's threshold; then the speed of one error-feedback step at 100M values
// against a device-to-device copy of the same tensor. Prints FAIL lines and a summary.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gradcomp/device/codec.h"
#include "gradcomp/registry.h"

using namespace gradcomp;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::printf("FAIL %s\n", what.c_str());
  }
}

std::span<float> floats(const at::Tensor& t) {
  return {t.data_ptr<float>(), static_cast<std::size_t>(t.numel())};
}

at::Tensor gradient(std::int64_t n) {
  at::Tensor g = at::randn({n}) * 0.01;
  if (n > 10) {
    g.index_put_({at::arange(0, n, 97)}, 3.0f);
    g.index_put_({at::arange(5, n, 101)}, 0.0f);
  }
  return g;
}

double seconds(const std::function<void()>& f, const at::Device& dev, int reps) {
  f();
  if (dev.is_cuda()) at::zeros({1}, at::TensorOptions().device(dev)).item<float>();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) f();
  if (dev.is_cuda()) at::zeros({1}, at::TensorOptions().device(dev)).item<float>();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

}  // namespace

int main(int argc, char** argv) {
  const at::Device dev(argc > 1 ? argv[1] : "cuda");
  const std::int64_t big = argc > 2 ? std::stoll(argv[2]) : 100'000'000;
  at::manual_seed(1);
  const std::vector<std::string> specs = {"2bit",
                                          "2bit:threshold=0.005",
                                          "1bit",
                                          "signsgd",
                                          "efsign",
                                          "efsign:block=4096",
                                          "efsign:block=131072"};
  const std::vector<std::int64_t> sizes = {
      0, 1, 31, 33, 65536, 65537, 200003, (1 << 20) - 1, (1 << 20), 3 << 20};
  for (const auto& spec : specs) {
    const auto codec = builtin_registry().make_codec(spec);
    const auto device = device::make_device_codec(*codec);
    for (const std::int64_t n : sizes) {
      const std::string what = spec + " n=" + std::to_string(n);
      at::Tensor e_cpu = gradient(n) * 0.5;
      at::Tensor e_dev = e_cpu.to(dev, false, true);  // a copy on the CPU too
      for (std::uint64_t step = 0; step < 2; ++step) {
        const at::Tensor g = gradient(n);
        StepContext ctx;
        ctx.step = step;
        std::vector<std::byte> msg(codec->max_encoded_bytes(n));
        msg.resize(codec->encode(floats(g), ctx, msg));
        check(device::frame_message(*codec, n, device->encode_payload(g.to(dev), ctx).cpu()) == msg,
              what + " encode");
        std::vector<std::byte> ef(codec->max_encoded_bytes(n));
        ef.resize(codec->encode_with_residual(ResidualUpdate(floats(g)), floats(e_cpu), ctx, ef));
        const at::Tensor payload = device->encode_payload_with_residual(g.to(dev), e_dev, ctx);
        check(device::frame_message(*codec, n, payload.cpu()) == ef, what + " residual message");
        const at::Tensor e_back = e_dev.cpu();
        check(
            std::memcmp(e_back.data_ptr(), e_cpu.data_ptr(), 4 * static_cast<std::size_t>(n)) == 0,
            what + " residual");
        at::Tensor out_cpu = at::randn({n});
        at::Tensor out_dev = out_cpu.to(dev, false, true);
        codec->decode_add(ef, floats(out_cpu), 0.25f);
        device->decode_payload_add(device::open_message(ef, *codec, n).to(dev), out_dev, 0.25f);
        const at::Tensor out_back = out_dev.cpu();
        check(std::memcmp(out_back.data_ptr(), out_cpu.data_ptr(),
                          4 * static_cast<std::size_t>(n)) == 0,
              what + " decode");
      }
    }
    std::printf("checked %s\n", spec.c_str());
    std::fflush(stdout);
  }
  // Speed: one error-feedback step (e += g, encode, e -= decode) on `big` values.
  const at::Tensor g = at::randn({big}, at::TensorOptions().device(dev)) * 0.01;
  const at::Tensor e = at::zeros_like(g);
  const at::Tensor c = at::empty_like(g);
  const double copy = seconds([&] { c.copy_(g); }, dev, 20);
  std::printf("copy %lld floats: %.3f ms (%.0f GB/s read+write)\n", static_cast<long long>(big),
              copy * 1e3, 8.0 * static_cast<double>(big) / copy / 1e9);
  for (const auto& spec :
       {"2bit:threshold=0.005", "2bit", "1bit", "signsgd", "efsign", "efsign:block=4096"}) {
    const auto codec = builtin_registry().make_codec(spec);
    const auto device = device::make_device_codec(*codec);
    StepContext ctx;
    const double t = seconds([&] { device->encode_payload_with_residual(g, e, ctx); }, dev, 10);
    const double d = seconds(
        [&] {
          at::Tensor p = device->encode_payload(g, ctx);
          device->decode_payload_add(p, c, 1.0f);
        },
        dev, 10);
    std::printf(
        "%-22s encode_with_residual %.3f ms = %.0f%% of copy speed; encode+decode %.3f ms\n", spec,
        t * 1e3, 100.0 * copy / t, d * 1e3);
    std::fflush(stdout);
  }
  std::printf("%d failures\n", failures);
  return failures == 0 ? 0 : 1;
}
