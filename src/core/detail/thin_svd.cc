// Eigen stays inside this file (gradcomp_core links it PRIVATE): the header speaks
// std::vector<float>. Single-threaded on purpose: Eigen's OpenMP GEMM picks its blocking
// from the thread count, which would make results depend on it.
#define EIGEN_DONT_PARALLELIZE
#include "detail/thin_svd.h"

#include <Eigen/Core>
#include <Eigen/QR>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "detail/lapack_svd.h"
#include "gradcomp/error.h"
#include "gradcomp/rng.h"

namespace gradcomp::detail {

namespace {

using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;  // column-major
using MapF = Eigen::Map<MatF>;
using StridedF = Eigen::Map<MatF, Eigen::Unaligned, Eigen::OuterStride<>>;

// Fixed key of the range finder's test matrix: any fixed full-rank choice works, and a
// fixed one keeps the decomposition a pure function of M.
constexpr std::uint64_t kOmegaKey = 0x41544F4D4F535644ull;  // "ATOMOSVD"

// Grow-only per-thread storage behind the Eigen maps.
struct Workspace {
  std::vector<float> w;      // the scaled matrix, then the residual R (rows x cols)
  std::vector<float> q;      // basis Q (rows x max_basis)
  std::vector<float> b;      // B = Q^T M (max_basis x cols, leading dimension max_basis)
  std::vector<float> omega;  // test matrix block (cols x block)
  std::vector<float> y;      // sample block (rows x block)
  std::vector<float> small;  // the matrix handed to LAPACK (B, k x cols)
  DenseSvd svd;              // LAPACK's output and work arrays
};

float* grow(std::vector<float>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

Workspace& workspace() {
  thread_local Workspace ws;
  return ws;
}

double squared_norm(const float* x, std::size_t n) {
  // Four accumulators in a fixed order (no dependence on how the loop is compiled).
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (std::size_t l = 0; l < 4; ++l) acc[l] += double(x[i + l]) * double(x[i + l]);
  }
  for (; i < n; ++i) acc[0] += double(x[i]) * double(x[i]);
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

// W (column-major, rows x cols) = M (row-major) * 2^shift, in double then rounded:
// exact for every element that stays in float's normal range.
void load_scaled(std::span<const float> m, std::size_t rows, std::size_t cols, int shift,
                 float* w) {
  const double f = std::ldexp(1.0, shift);
  for (std::size_t i = 0; i < rows; ++i) {
    const float* src = m.data() + i * cols;
    for (std::size_t j = 0; j < cols; ++j) w[j * rows + i] = static_cast<float>(src[j] * f);
  }
}

// Copies sigma (scaled back by 2^-shift), U (rows x k, column-major) and V (from Vt,
// k x cols, column-major) into out.
void emit(const DenseSvd& svd, const float* u, int shift, ThinSvd& out) {
  const std::size_t k = svd.k;
  out.rank = k;
  out.sigma.resize(k);
  out.u.assign(u, u + out.rows * k);
  out.v.resize(out.cols * k);
  for (std::size_t i = 0; i < k; ++i) {
    out.sigma[i] = static_cast<float>(std::ldexp(double(svd.sigma[i]), -shift));
    for (std::size_t c = 0; c < out.cols; ++c) out.v[i * out.cols + c] = svd.vt[c * k + i];
  }
}

// LAPACK's SVD of the column-major rows x cols matrix a (overwritten) into ws.svd;
// throws InvalidArgument naming the shape when it fails.
void dense_or_throw(float* a, std::size_t rows, std::size_t cols, Workspace& ws) {
  const std::string why = dense_svd(a, rows, cols, ws.svd);
  if (!why.empty()) {
    throw InvalidArgument("thin_svd: the SVD of a " + std::to_string(rows) + " x " +
                          std::to_string(cols) + " matrix failed (" + why + ")");
  }
}

void full_svd(std::span<const float> m, int shift, ThinSvd& out) {
  Workspace& ws = workspace();
  load_scaled(m, out.rows, out.cols, shift, grow(ws.w, out.rows * out.cols));
  dense_or_throw(ws.w.data(), out.rows, out.cols, ws);
  emit(ws.svd, ws.svd.u.data(), shift, out);
  out.method = SvdMethod::kFull;
  out.basis = 0;
  out.residual = 0.0;
}

// The blocked randomized range finder with its a-posteriori check; false when the
// basis would exceed max_basis (the caller then runs the full SVD).
bool randomized_svd(std::span<const float> m, int shift, const SvdOptions& opt, ThinSvd& out) {
  Workspace& ws = workspace();
  const std::size_t rows = out.rows, cols = out.cols;
  const std::size_t small = std::min(rows, cols);
  const auto max_basis = static_cast<std::size_t>(opt.max_basis_fraction * double(small));
  const std::size_t block = std::max<std::size_t>(1, opt.block);
  if (max_basis == 0) return false;
  const auto r = Eigen::Index(rows), c = Eigen::Index(cols), kb = Eigen::Index(max_basis);

  load_scaled(m, rows, cols, shift, grow(ws.w, rows * cols));
  MapF res(ws.w.data(), r, c);
  MapF q(grow(ws.q, rows * max_basis), r, kb);
  MapF bmat(grow(ws.b, max_basis * cols), kb, c);
  const double norm2 = squared_norm(ws.w.data(), rows * cols);
  const double accept2 = opt.tolerance * opt.tolerance * norm2;
  const CounterRng rng(kOmegaKey);

  std::size_t k = 0;
  double res2 = norm2;
  while (true) {
    const std::size_t b = std::min(block, max_basis - k);
    if (b == 0) return false;
    const auto eb = Eigen::Index(b), ek = Eigen::Index(k);
    // Omega entries uniform in [-1, 1), counter (column, row) < min(rows, cols) * cols <= n.
    MapF omega(grow(ws.omega, cols * b), c, eb);
    for (std::size_t t = 0; t < b; ++t) {
      for (std::size_t j = 0; j < cols; ++j) {
        const auto ctr = static_cast<std::uint32_t>((k + t) * cols + j);
        omega(Eigen::Index(j), Eigen::Index(t)) =
            static_cast<float>(rng.bits(ctr) >> 8) * 0x1.0p-23f - 1.0f;
      }
    }
    MapF y(grow(ws.y, rows * b), r, eb);
    y.noalias() = res * omega;
    for (int pass = 0; pass < 2 && k > 0; ++pass) {
      y.noalias() -= q.leftCols(ek) * (q.leftCols(ek).transpose() * y);
    }
    const Eigen::HouseholderQR<MatF> qr(y);
    q.middleCols(ek, eb) = qr.householderQ() * MatF::Identity(r, eb);
    if (k > 0) {
      // Columns of Y at noise level (the rank is exhausted) are normalised by the QR
      // from tiny remainders whose leftover components along Q are then no longer tiny
      // relative to them: project once more and re-orthonormalise (Martinsson-Voronin).
      y.noalias() = q.middleCols(ek, eb);
      y.noalias() -= q.leftCols(ek) * (q.leftCols(ek).transpose() * y);
      const Eigen::HouseholderQR<MatF> qr2(y);
      q.middleCols(ek, eb) = qr2.householderQ() * MatF::Identity(r, eb);
    }
    bmat.middleRows(ek, eb).noalias() = q.middleCols(ek, eb).transpose() * res;
    res.noalias() -= q.middleCols(ek, eb) * bmat.middleRows(ek, eb);
    k += b;
    res2 = squared_norm(ws.w.data(), rows * cols);
    if (res2 <= accept2) break;
    if (k >= max_basis) return false;
  }

  // M = Q B (+ the negligible R): the SVD of the k x cols matrix B gives M's.
  const auto ek = Eigen::Index(k);
  MapF bk(grow(ws.small, k * cols), ek, c);
  bk = bmat.topRows(ek);
  dense_or_throw(bk.data(), k, cols, ws);
  // k <= cols here (k <= max_basis <= min(rows, cols)), so U_B is k x k.
  MapF u(grow(ws.y, rows * k), r, ek);
  u.noalias() = q.leftCols(ek) * MapF(ws.svd.u.data(), ek, ek);
  emit(ws.svd, u.data(), shift, out);
  out.method = SvdMethod::kRandomized;
  out.basis = k;
  out.residual = norm2 > 0.0 ? std::sqrt(res2 / norm2) : 0.0;
  return true;
}

}  // namespace

void thin_svd(std::span<const float> m, std::size_t rows, std::size_t cols, ThinSvd& out,
              const SvdOptions& options) {
  out.rows = rows;
  out.cols = cols;
  out.rank = 0;
  out.sigma.clear();
  out.u.clear();
  out.v.clear();
  out.method = options.method == SvdMethod::kAuto ? SvdMethod::kFull : options.method;
  out.basis = 0;
  out.residual = 0.0;
  const double norm2 = squared_norm(m.data(), rows * cols);
  if (rows == 0 || cols == 0 || norm2 == 0.0) return;
  const double norm = std::sqrt(norm2);

  if (rows == 1 || cols == 1) {
    // One triplet: sigma = ||M||, the unit vector M / ||M||, and the 1x1 vector [1].
    out.rank = 1;
    out.sigma.assign(1, static_cast<float>(norm));
    std::vector<float>& vec = rows == 1 ? out.v : out.u;
    std::vector<float>& one = rows == 1 ? out.u : out.v;
    one.assign(1, 1.0f);
    vec.resize(rows * cols);
    for (std::size_t i = 0; i < rows * cols; ++i) {
      vec[i] = static_cast<float>(double(m[i]) / norm);
    }
    return;
  }

  // 2^shift * ||M|| lies in [0.5, 1).
  int exponent = 0;
  std::frexp(norm, &exponent);
  const int shift = -exponent;

  const bool try_randomized =
      options.method == SvdMethod::kRandomized ||
      (options.method == SvdMethod::kAuto && std::min(rows, cols) >= options.full_below);
  if (try_randomized && randomized_svd(m, shift, options, out)) return;
  full_svd(m, shift, out);
}

}  // namespace gradcomp::detail
