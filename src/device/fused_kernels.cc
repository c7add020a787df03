// The ATen side of the fused CUDA kernels (fused_kernels.h). Without them in the build
// (GRADCOMP_CUDA_KERNELS undefined), usable() is false and no codec calls the rest.
#include "device/fused_kernels.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gradcomp/device/codec.h"
#include "gradcomp/error.h"

#ifdef GRADCOMP_CUDA_KERNELS
#include "device/cuda/kernels.h"
#endif

namespace gradcomp::device::fused {

namespace {

#ifdef GRADCOMP_CUDA_KERNELS
// The current stream of t's device, as the cudaStream_t the kernels take.
void* stream_of(const at::Tensor& t) {
  return c10::impl::getDeviceGuardImpl(t.device().type())->getStream(t.device()).native_handle();
}

void check(const char* error, const char* kernel) {
  if (error != nullptr) throw InvalidArgument(std::string("CUDA kernel ") + kernel + ": " + error);
}

float* floats(const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }
const float* cfloats(const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

cuda::Values values(const at::Tensor& a, const at::Tensor& b) {
  return {a.data_ptr<float>(), cfloats(b), a.numel()};
}
#endif

}  // namespace

bool usable(const at::Tensor& t) { return t.is_cuda() && cuda_kernels_enabled(); }

#ifdef GRADCOMP_CUDA_KERNELS

void encode_sign_bits(const at::Tensor& a, const at::Tensor& b, float tau, bool at_least,
                      const at::Tensor& out, float if_set, float if_clear,
                      const at::Tensor& bytes) {
  const c10::DeviceGuard guard(a.device());
  check(cuda::encode_sign_bits(values(a, b), tau, at_least, floats(out), if_set, if_clear,
                               bytes.data_ptr<std::uint8_t>(), stream_of(a)),
        "encode_sign_bits");
}

void add_sign_bits(const at::Tensor& bytes, float one, float zero, const at::Tensor& out) {
  const c10::DeviceGuard guard(out.device());
  check(cuda::add_sign_bits(bytes.data_ptr<std::uint8_t>(), out.numel(), one, zero,
                            out.data_ptr<float>(), stream_of(out)),
        "add_sign_bits");
}

void encode_codes2(const at::Tensor& a, const at::Tensor& b, float tau, const at::Tensor& out,
                   float neg_tau, const at::Tensor& codes, const at::Tensor& non_finite) {
  const c10::DeviceGuard guard(a.device());
  check(cuda::encode_codes2(
            values(a, b), tau, floats(out), neg_tau, codes.data_ptr<std::uint8_t>(), codes.numel(),
            non_finite.defined() ? non_finite.data_ptr<std::int32_t>() : nullptr, stream_of(a)),
        "encode_codes2");
}

at::Tensor check_codes2(const at::Tensor& codes, std::int64_t n) {
  const c10::DeviceGuard guard(codes.device());
  at::Tensor flags = at::zeros({3}, codes.options().dtype(at::kInt));
  check(cuda::check_codes2(codes.data_ptr<std::uint8_t>(), n, codes.numel(),
                           flags.data_ptr<std::int32_t>(), stream_of(codes)),
        "check_codes2");
  return flags;
}

void add_codes2(const at::Tensor& codes, const float (&lut)[4], const at::Tensor& out) {
  const c10::DeviceGuard guard(out.device());
  const cuda::Lut4 table{{lut[0], lut[1], lut[2], lut[3]}};
  check(cuda::add_codes2(codes.data_ptr<std::uint8_t>(), out.numel(), table, out.data_ptr<float>(),
                         stream_of(out)),
        "add_codes2");
}

at::Tensor encode_halves(const at::Tensor& a, const at::Tensor& b, float max_finite,
                         const at::Tensor& out, const at::Tensor& halves) {
  const c10::DeviceGuard guard(a.device());
  at::Tensor flag = at::zeros({1}, a.options().dtype(at::kInt));
  check(cuda::encode_halves(values(a, b), halves.scalar_type() == at::kBFloat16, max_finite,
                            floats(out), reinterpret_cast<std::uint16_t*>(halves.data_ptr()),
                            flag.data_ptr<std::int32_t>(), stream_of(a)),
        "encode_halves");
  return flag;
}

at::Tensor select_at_least(const at::Tensor& a, const at::Tensor& b, const at::Tensor& thr,
                           const at::Tensor& out, std::int64_t cap) {
  const c10::DeviceGuard guard(a.device());
  at::Tensor slots = at::empty({cap}, a.options().dtype(at::kLong));
  at::Tensor count = at::zeros({1}, a.options().dtype(at::kLong));
  check(cuda::select_at_least(values(a, b), thr.data_ptr<std::int32_t>(), floats(out),
                              slots.data_ptr<std::int64_t>(), cap,
                              reinterpret_cast<unsigned long long*>(count.data_ptr<std::int64_t>()),
                              stream_of(a)),
        "select_at_least");
  const std::int64_t c = count.item<std::int64_t>();
  if (c <= cap) return std::get<0>(at::sort(slots.narrow(0, 0, c)));
  // More candidates than slots (a threshold far below the k-th value): a second pass over
  // the values, where the kernel wrote them or as they were.
  const at::Tensor x = out.defined() ? out : (b.defined() ? a.add(b) : a);
  return at::nonzero(x.abs().view(at::kInt).ge(thr)).view(-1);
}

at::Tensor sample_line_starts(std::uint64_t key, std::int64_t lines, std::int64_t lines_total,
                              std::int64_t line, const at::Tensor& like) {
  const c10::DeviceGuard guard(like.device());
  at::Tensor starts = at::empty({lines}, like.options().dtype(at::kLong));
  check(cuda::sample_line_starts(key, lines, lines_total, line, starts.data_ptr<std::int64_t>(),
                                 stream_of(like)),
        "sample_line_starts");
  return starts;
}

at::Tensor accumulate(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out) {
  const c10::DeviceGuard guard(a.device());
  at::Tensor flag = at::zeros({1}, a.options().dtype(at::kInt));
  check(cuda::accumulate(values(a, b), floats(out), flag.data_ptr<std::int32_t>(), stream_of(a)),
        "accumulate");
  return flag;
}

#else  // The kernels are not in this build: usable() is false, so nothing calls these.

namespace {
[[noreturn]] void not_built(const char* kernel) {
  throw InvalidArgument(std::string("CUDA kernel ") + kernel +
                        ": gradcomp was built without its CUDA kernels");
}
}  // namespace

void encode_sign_bits(const at::Tensor&, const at::Tensor&, float, bool, const at::Tensor&, float,
                      float, const at::Tensor&) {
  not_built("encode_sign_bits");
}
void add_sign_bits(const at::Tensor&, float, float, const at::Tensor&) {
  not_built("add_sign_bits");
}
void encode_codes2(const at::Tensor&, const at::Tensor&, float, const at::Tensor&, float,
                   const at::Tensor&, const at::Tensor&) {
  not_built("encode_codes2");
}
at::Tensor check_codes2(const at::Tensor&, std::int64_t) { not_built("check_codes2"); }
void add_codes2(const at::Tensor&, const float (&)[4], const at::Tensor&) {
  not_built("add_codes2");
}
at::Tensor encode_halves(const at::Tensor&, const at::Tensor&, float, const at::Tensor&,
                         const at::Tensor&) {
  not_built("encode_halves");
}
at::Tensor select_at_least(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                           const at::Tensor&, std::int64_t) {
  not_built("select_at_least");
}
at::Tensor sample_line_starts(std::uint64_t, std::int64_t, std::int64_t, std::int64_t,
                              const at::Tensor&) {
  not_built("sample_line_starts");
}
at::Tensor accumulate(const at::Tensor&, const at::Tensor&, const at::Tensor&) {
  not_built("accumulate");
}

#endif

}  // namespace gradcomp::device::fused

namespace gradcomp::device {

namespace {
// The switch behind cuda_kernels_enabled(): on unless GRADCOMP_DEVICE_KERNELS=0.
std::atomic<bool>& switched_on() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("GRADCOMP_DEVICE_KERNELS");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }()};
  return on;
}

}  // namespace

bool cuda_kernels_built() {
#ifdef GRADCOMP_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

bool cuda_kernels_enabled() { return cuda_kernels_built() && switched_on().load(); }

bool set_cuda_kernels(bool on) { return switched_on().exchange(on) && cuda_kernels_built(); }

}  // namespace gradcomp::device
