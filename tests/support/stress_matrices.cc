#include "support/stress_matrices.h"

#include <Eigen/Core>
#include <Eigen/QR>
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <random>
#include <stdexcept>

namespace gradcomp::test {

namespace {

using MatD = Eigen::MatrixXd;

MatD gaussian(std::size_t rows, std::size_t cols, std::mt19937_64& rng) {
  std::normal_distribution<double> n;
  MatD m(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = n(rng);
  return m;
}

// n x r with orthonormal columns (the Q of a Gaussian matrix's QR).
MatD orthonormal(std::size_t n, std::size_t r, std::mt19937_64& rng) {
  const Eigen::HouseholderQR<MatD> qr(gaussian(n, r, rng));
  return qr.householderQ() * MatD::Identity(Eigen::Index(n), Eigen::Index(r));
}

// U diag(s) V^T with random orthonormal U, V.
MatD with_spectrum(std::size_t rows, std::size_t cols, const Eigen::VectorXd& s,
                   std::mt19937_64& rng) {
  const auto r = static_cast<std::size_t>(s.size());
  return orthonormal(rows, r, rng) * s.asDiagonal() * orthonormal(cols, r, rng).transpose();
}

MatD exact_low_rank(std::size_t rows, std::size_t cols, std::size_t r, std::mt19937_64& rng) {
  return gaussian(rows, r, rng) * gaussian(r, cols, rng);
}

// delta (rows x r, heavy-tailed: Student-t-like) times ReLU activations (r x cols, about
// half exactly 0): a fully connected layer's weight gradient over a batch of r.
MatD gradient_like(std::size_t rows, std::size_t cols, std::size_t r, std::mt19937_64& rng) {
  MatD delta = gaussian(rows, r, rng);
  std::chi_squared_distribution<double> chi(3.0);
  for (Eigen::Index i = 0; i < delta.size(); ++i) delta.data()[i] /= std::sqrt(chi(rng) / 3.0);
  MatD act = gaussian(r, cols, rng).cwiseMax(0.0);
  return 1e-3 * delta * act;
}

}  // namespace

std::string pattern_name(StressPattern p) {
  static const char* const names[] = {
      "low-rank+noise", "exact-low-rank", "sparse-zeros", "zero-lines",    "repeated", "clustered",
      "graded",         "tiny",           "huge",         "gradient-like", "all-zero", "one-entry"};
  return names[static_cast<int>(p)];
}

std::string StressMatrix::describe() const {
  return std::to_string(rows) + "x" + std::to_string(cols) + " rank " + std::to_string(rank) + " " +
         pattern_name(pattern);
}

StressMatrix make_stress_matrix(std::size_t rows, std::size_t cols, std::size_t rank,
                                StressPattern pattern, std::uint64_t seed) {
  StressMatrix out;
  out.rows = rows;
  out.cols = cols;
  out.rank = std::clamp<std::size_t>(rank, 1, std::min(rows, cols));
  out.pattern = pattern;
  const std::size_t r = out.rank;
  std::mt19937_64 rng(seed);
  MatD m;
  switch (pattern) {
    case StressPattern::kLowRankNoise: {
      m = exact_low_rank(rows, cols, r, rng);
      m += 1e-3 * (m.norm() / std::sqrt(double(rows * cols))) * gaussian(rows, cols, rng);
      break;
    }
    case StressPattern::kExactLowRank:
      m = exact_low_rank(rows, cols, r, rng);
      break;
    case StressPattern::kSparseZeros: {
      m = exact_low_rank(rows, cols, r, rng);
      std::bernoulli_distribution zero(0.5);
      for (Eigen::Index i = 0; i < m.size(); ++i) {
        if (zero(rng)) m.data()[i] = 0.0;
      }
      break;
    }
    case StressPattern::kZeroLines: {
      m = exact_low_rank(rows, cols, r, rng);
      for (std::size_t i = 0; i < rows; i += 3) m.row(Eigen::Index(i)).setZero();
      for (std::size_t j = 1; j < cols; j += 3) m.col(Eigen::Index(j)).setZero();
      break;
    }
    case StressPattern::kRepeated:
      m = with_spectrum(rows, cols, Eigen::VectorXd::Constant(Eigen::Index(r), 1.0), rng);
      break;
    case StressPattern::kClustered: {
      Eigen::VectorXd s(static_cast<Eigen::Index>(r));
      for (std::size_t i = 0; i < r; ++i) s(Eigen::Index(i)) = 1.0 + 1e-6 * double(i % 7);
      m = with_spectrum(rows, cols, s, rng);
      break;
    }
    case StressPattern::kGraded: {
      Eigen::VectorXd s(static_cast<Eigen::Index>(r));
      for (std::size_t i = 0; i < r; ++i) {
        s(Eigen::Index(i)) = r == 1 ? 1.0 : std::pow(1e-7, double(i) / double(r - 1));
      }
      m = with_spectrum(rows, cols, s, rng);
      break;
    }
    case StressPattern::kTiny: {
      m = exact_low_rank(rows, cols, r, rng);
      m *= 4.0 * double(FLT_MIN) / m.cwiseAbs().maxCoeff();
      break;
    }
    case StressPattern::kHuge: {
      m = exact_low_rank(rows, cols, r, rng);
      m *= 0.5 * double(FLT_MAX) / std::sqrt(double(rows * cols)) / m.cwiseAbs().maxCoeff();
      break;
    }
    case StressPattern::kGradientLike:
      m = gradient_like(rows, cols, r, rng);
      break;
    case StressPattern::kAllZero:
      m = MatD::Zero(Eigen::Index(rows), Eigen::Index(cols));
      break;
    case StressPattern::kOneEntry: {
      m = MatD::Zero(Eigen::Index(rows), Eigen::Index(cols));
      std::uniform_int_distribution<Eigen::Index> at(0, m.size() - 1);
      m.data()[at(rng)] = -3.5;
      break;
    }
    case StressPattern::kCount:
      throw std::invalid_argument("make_stress_matrix: kCount is not a pattern");
  }
  out.m.resize(rows * cols);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < cols; ++j) {
      out.m[i * cols + j] = static_cast<float>(m(Eigen::Index(i), Eigen::Index(j)));
    }
  }
  return out;
}

std::vector<std::pair<std::size_t, std::size_t>> model_shapes(bool small) {
  const std::vector<std::pair<std::size_t, std::size_t>> all = {
      // mlp: 784-1536-1536-10
      {1536, 784},
      {1536, 1536},
      {10, 1536},
      // lenet5 on 28x28x1 and 32x32x3: conv1, conv2, fc1, fc2, fc3
      {6, 25},
      {6, 75},
      {16, 150},
      {120, 400},
      {120, 576},
      {84, 120},
      {10, 84},
      // resnet20 (3x3 kernels, 16/32/64 channels) and its classifier
      {16, 9},
      {16, 27},
      {16, 144},
      {32, 144},
      {32, 288},
      {64, 288},
      {64, 576},
      {10, 64}};
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (const auto& s : all) {
    if (!small || s.first * s.second <= 20000) out.push_back(s);
  }
  return out;
}

StressMatrix read_matrix_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::int64_t dims[2] = {0, 0};
  if (!f.read(reinterpret_cast<char*>(dims), sizeof dims) || dims[0] <= 0 || dims[1] <= 0) {
    throw std::runtime_error("read_matrix_file: cannot read the header of " + path);
  }
  const auto rows = static_cast<std::size_t>(dims[0]), cols = static_cast<std::size_t>(dims[1]);
  std::vector<float> col_major(rows * cols);
  if (!f.read(reinterpret_cast<char*>(col_major.data()),
              static_cast<std::streamsize>(4 * col_major.size()))) {
    throw std::runtime_error("read_matrix_file: " + path + " is shorter than its header says");
  }
  StressMatrix out;
  out.rows = rows;
  out.cols = cols;
  out.rank = std::min(rows, cols);
  out.m.resize(rows * cols);
  for (std::size_t j = 0; j < cols; ++j) {
    for (std::size_t i = 0; i < rows; ++i) out.m[i * cols + j] = col_major[j * rows + i];
  }
  return out;
}

}  // namespace gradcomp::test
