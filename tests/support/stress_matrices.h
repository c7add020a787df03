// Matrices for the factorization stress test (tests/unit/factorization_stress_test.cc):
// the shapes gradcomp's built-in models give their layers, odd shapes, and the inputs
// that break float decompositions: low rank plus noise, exact zeros, zero rows and
// columns, repeated and clustered singular values, graded spectra, magnitudes near
// FLT_MIN and near FLT_MAX / sqrt(n), and gradient-like sums of outer products.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gradcomp::test {

enum class StressPattern : std::uint8_t {
  kLowRankNoise,  // rank r plus 1e-3 relative Gaussian noise (full rank)
  kExactLowRank,  // A (rows x r) * B (r x cols)
  kSparseZeros,   // rank r with about half the entries set to exactly 0
  kZeroLines,     // rank r with a third of the rows and of the columns zero
  kRepeated,      // r equal singular values (prescribed spectrum)
  kClustered,     // r singular values within 1e-6 of each other
  kGraded,        // r singular values 1, 10^(-7/(r-1)), ..., 1e-7
  kTiny,          // rank r, entries near FLT_MIN (some subnormal)
  kHuge,          // rank r, entries near FLT_MAX / sqrt(rows * cols)
  kGradientLike,  // r outer products delta x relu(activation), heavy-tailed deltas
  kAllZero,       // exactly 0
  kOneEntry,      // one nonzero element
  kCount
};

std::string pattern_name(StressPattern p);

struct StressMatrix {
  std::size_t rows = 0, cols = 0, rank = 0;
  StressPattern pattern = StressPattern::kExactLowRank;
  std::vector<float> m;  // row-major, as gradients are stored
  std::string describe() const;
};

// A pure function of its arguments. rank is clamped to [1, min(rows, cols)].
StressMatrix make_stress_matrix(std::size_t rows, std::size_t cols, std::size_t rank,
                                StressPattern pattern, std::uint64_t seed);

// The layer matrices (rows x cols, a conv kernel o x i*k*k) of the built-in models
// (src/train/models.cc): mlp 784-1536-1536-10, lenet5 and resnet20 on 1- and 3-channel
// inputs; `small` keeps those with rows * cols <= 20,000.
std::vector<std::pair<std::size_t, std::size_t>> model_shapes(bool small);

// Reads the test data format (tests/data/README.md): two
// little-endian int64 rows, cols, then rows * cols float32 column-major. Returns the
// matrix row-major. Throws std::runtime_error when the file is missing or short.
StressMatrix read_matrix_file(const std::string& path);

}  // namespace gradcomp::test
