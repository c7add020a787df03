// Sketched-SGD through the parameter server (Ivkin et al. 2019, the topology of their
// paper; docs/algorithms/sketches.md): what workers and servers agree on, key by key, and the
// records of its two rounds. `--topology ps-sync --compressor sketched-sgd[:...]`.
//
// One synchronous step, for every compressible key on a compressed step:
//   worker:  u <- m*u + g ; v <- v + u ; push S(v)                 (kSketch: r*c floats)
//   server:  S <- sum of the W sketches (worker order) ;
//            C <- the min(n, p2*k) coordinates of the largest |median estimate|
//            reply C                                               (kIndices, Kind kCandidates)
//   worker:  push v[C]                                             (kDense: |C| floats)
//   server:  sums <- sum of the W vectors v[C] (worker order) ;
//            Delta <- the k largest |sums| ; reply Delta / W        (kSparse)
//   worker:  grad <- Delta / W ; u[supp Delta] <- 0 (unless mask=false) ; v[supp Delta] <- 0
// This is the allreduce scheme's arithmetic (src/dist/sketched_sgd.cc) with the
// server's sums in worker order in place of Gloo's; the hashes are the scheme's, keyed
// by (seed, step, the key's context bucket), so an unsplit bucket is sketched exactly
// as the allreduce scheme sketches it. A bucket split across servers is sketched, and
// its top k taken, per key (k from the key's own size).
// Dense keys, and every key on a dense step, go as fp32 and come back as the mean; the
// trainer's optimizer applies momentum to those (u and v are left alone).
// A server that owns no sketched key on a step answers at once with its final reply.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../sketch_scheme_util.h"
#include "gradcomp/dist/ps.h"

namespace gradcomp::dist::ps {

struct SketchKey {
  bool on = false;  // compressible: sketched on compressed steps
  std::uint32_t cols = 0;
  std::size_t k = 0;   // coordinates updated per step
  std::size_t kc = 0;  // candidates: min(numel, p2 * k)
};

struct SketchPlan {
  std::string spec;  // canonical: "sketched-sgd:k=0,ratio=0.01,..."
  sketch_scheme::Geometry geo;
  std::size_t p2 = 4;
  float momentum = 0.9f;
  bool mask = true;             // zero u where Delta is applied (momentum factor masking)
  std::vector<SketchKey> keys;  // by key id

  std::size_t cells(std::uint32_t key) const { return std::size_t{geo.rows} * keys[key].cols; }
  // Largest record payload of key `k` in either direction (sketch, candidates, values,
  // sparse update).
  std::size_t max_record_bytes(const PsKey& k) const;
  kernels::SketchHash hash(const PsKey& k, std::uint64_t seed, std::uint64_t step) const {
    return sketch_scheme::sketched_sgd_hash(seed, step, k.context_bucket(), geo.rows,
                                            keys[k.id].cols);
  }
};

// The plan when the method is sketched-sgd (the one scheme a parameter server runs:
// SchemeDescription::runs_on_ps_sync), std::nullopt for codec and memory methods. The
// method was parsed for the configuration (PsConfig::method), which refused the other
// schemes, bad parameters, and sketched-sgd outside ps-sync with a dense downlink.
std::optional<SketchPlan> sketch_plan_for(const Method& method, std::span<const PsKey> keys);

// Records. Writers return the bytes written into `out`, readers validate everything
// before returning and throw CorruptMessage("ps <who>: key K ...") otherwise.

std::size_t write_indices(std::span<const std::uint32_t> idx, std::span<std::byte> out);
// At most `max` strictly ascending coordinates below n.
void read_indices(std::span<const std::byte> data, std::size_t n, std::size_t max,
                  std::uint32_t key, const std::string& who, std::vector<std::uint32_t>& out);

std::size_t write_sparse(std::span<const std::uint32_t> idx, std::span<const float> vals,
                         std::span<std::byte> out);
// At most `max` entries, coordinates strictly ascending and each one of `allowed`
// (ascending), values finite.
void read_sparse(std::span<const std::byte> data, std::span<const std::uint32_t> allowed,
                 std::size_t max, std::uint32_t key, const std::string& who,
                 std::vector<std::uint32_t>& idx, std::vector<float>& vals);

}  // namespace gradcomp::dist::ps
