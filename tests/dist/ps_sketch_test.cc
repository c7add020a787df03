// Sketched-SGD through the parameter server (src/dist/ps/sketch_plan.h): the same
// updates as the allreduce scheme (integer-valued gradients, momentum 1/2 and W a power
// of two, so every sum is exact in any order and the two must agree bit for bit);
// split keys conserve the gradient; the records' readers reject what they must.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../../src/dist/ps/sketch_plan.h"
#include "dist_test_support.h"
#include "gradcomp/dist/ps.h"
#include "gradcomp/dist/reducers.h"
#include "gradcomp/error.h"
#include "gradcomp/wire.h"
#include "support/test_support.h"

namespace gradcomp::dist {
namespace {

using test::run_ranks;

constexpr std::uint64_t kSeed = 21;
constexpr int kSteps = 5;
// The last bucket is the dense one; bucket 1 has one element.
const std::vector<BucketShape> kShapes = {
    {0, 2000, true, 0}, {1, 1, true, 0}, {2, 777, true, 0}, {3, 1200, true, 0}, {4, 50, false, 0}};

std::vector<float> gradient_of(int rank, int step, std::size_t b) {
  const std::uint64_t key = 7919ull * static_cast<std::uint64_t>(rank) + 104729ull * step + b;
  return gradcomp::test::integer_gradient(kShapes[b].numel, key, 8);
}

// [worker][step * buckets + b]: what each worker's buckets hold after each reduction;
// step 0 is a dense step (--dense-steps 1).
using Outputs = std::vector<std::vector<std::vector<float>>>;

template <class Reduce>
void run_steps(int rank, Reduce&& reduce, Outputs& out) {
  for (int step = 0; step < kSteps; ++step) {
    std::vector<std::vector<float>> grads;
    std::vector<BucketRef> refs;
    for (std::size_t b = 0; b < kShapes.size(); ++b) grads.push_back(gradient_of(rank, step, b));
    for (std::size_t b = 0; b < kShapes.size(); ++b) {
      refs.push_back({kShapes[b].id, grads[b], step > 0 && kShapes[b].compressible});
    }
    StepContext ctx;
    ctx.seed = kSeed;
    ctx.step = static_cast<std::uint64_t>(step);
    reduce(refs, ctx);
    for (auto& g : grads) out[static_cast<std::size_t>(rank)].push_back(std::move(g));
  }
}

Outputs run_allreduce(const std::string& spec, int workers) {
  Outputs out(static_cast<std::size_t>(workers));
  run_ranks(workers, [&](Communicator& comm) {
    auto reducer = make_reducer(spec, ReducerKind::kAuto, comm, kShapes);
    run_steps(
        comm.rank(),
        [&](std::span<const BucketRef> refs, const StepContext& ctx) {
          reducer->reduce(refs, ctx);
        },
        out);
  });
  return out;
}

Outputs run_ps(const std::string& spec, int workers, int servers, std::size_t split,
               std::vector<std::vector<float>>* residuals = nullptr) {
  Outputs out(static_cast<std::size_t>(workers));
  if (residuals) residuals->assign(static_cast<std::size_t>(workers), {});
  PsConfig cfg;
  cfg.topology = Topology::kPsSync;
  cfg.servers = servers;
  cfg.workers = workers;
  cfg.compressor = spec;
  cfg.split_elements = split;
  cfg.seed = kSeed;
  run_ranks(workers + servers, [&](Communicator& comm) {
    if (cfg.is_server(comm.rank())) {
      EXPECT_EQ(run_ps_server(cfg, comm, kShapes).steps, static_cast<std::uint64_t>(kSteps));
      return;
    }
    auto worker = make_ps_worker(cfg, comm, kShapes);
    EXPECT_TRUE(worker->momentum_in_memory());
    run_steps(
        comm.rank(),
        [&](std::span<const BucketRef> refs, const StepContext& ctx) { worker->reduce(refs, ctx); },
        out);
    if (residuals) {
      // Every key's error v, laid out in its bucket.
      const std::vector<PsKey> keys = plan_keys(kShapes, servers, split);
      std::vector<float>& r = (*residuals)[static_cast<std::size_t>(comm.rank())];
      std::size_t total = 0;
      for (const auto& s : kShapes) total += s.numel;
      r.assign(total, 0.0f);
      std::vector<std::size_t> start(kShapes.size(), 0);
      for (std::size_t b = 1; b < kShapes.size(); ++b) {
        start[b] = start[b - 1] + kShapes[b - 1].numel;
      }
      for (const StateBuffer& sb : worker->state()) {
        const std::string prefix = "key";
        const auto dot = sb.name.find('.');
        if (sb.name.substr(dot) != ".error") continue;
        const auto id = std::stoul(sb.name.substr(prefix.size(), dot - prefix.size()));
        const PsKey& k = keys[id];
        std::copy(sb.data.begin(), sb.data.end(),
                  r.begin() + static_cast<std::ptrdiff_t>(start[k.bucket] + k.offset));
      }
    }
    worker->finish();
  });
  return out;
}

TEST(PsSketchedSgd, EqualsTheAllreduceScheme) {
  const std::string spec = "sketched-sgd:ratio=0.02,rows=3,table=0.1,momentum=0.5";
  for (int workers : {2, 4}) {
    const Outputs ref = run_allreduce(spec, workers);
    for (int servers : {1, 2}) {
      const Outputs ps = run_ps(spec, workers, servers, kDefaultSplitElements);
      ASSERT_EQ(ref.size(), ps.size());
      for (std::size_t w = 0; w < ref.size(); ++w) {
        ASSERT_EQ(ref[w].size(), ps[w].size());
        for (std::size_t j = 0; j < ref[w].size(); ++j) {
          ASSERT_TRUE(gradcomp::test::same_bits(ref[w][j], ps[w][j]))
              << workers << " workers, " << servers << " servers, worker " << w << ", step "
              << j / kShapes.size() << ", bucket " << j % kShapes.size();
        }
      }
      // The compressed steps are sparse: at most k = ceil(0.02 n) per bucket.
      for (std::size_t j = kShapes.size(); j < ps[0].size(); ++j) {
        const std::size_t b = j % kShapes.size();
        if (!kShapes[b].compressible) continue;
        const auto nz =
            std::count_if(ps[0][j].begin(), ps[0][j].end(), [](float v) { return v != 0.0f; });
        EXPECT_LE(static_cast<std::size_t>(nz),
                  static_cast<std::size_t>(std::ceil(0.02 * static_cast<double>(kShapes[b].numel))))
            << "bucket " << b;
      }
    }
  }
}

// mask=false (u kept where the update lands) reaches the parameter server's workers too: the
// same outputs as the allreduce scheme with mask=false, and not those with masking.
TEST(PsSketchedSgd, WithoutMaskingEqualsTheAllreduceScheme) {
  const std::string spec = "sketched-sgd:ratio=0.02,rows=3,table=0.1,momentum=0.5,mask=false";
  const Outputs ref = run_allreduce(spec, 2);
  const Outputs ps = run_ps(spec, 2, 1, kDefaultSplitElements);
  const Outputs masked =
      run_ps("sketched-sgd:ratio=0.02,rows=3,table=0.1,momentum=0.5", 2, 1, kDefaultSplitElements);
  ASSERT_EQ(ref.size(), ps.size());
  bool differs_from_masked = false;
  for (std::size_t w = 0; w < ref.size(); ++w) {
    ASSERT_EQ(ref[w].size(), ps[w].size());
    for (std::size_t j = 0; j < ref[w].size(); ++j) {
      ASSERT_TRUE(gradcomp::test::same_bits(ref[w][j], ps[w][j])) << "worker " << w << ", " << j;
      if (!gradcomp::test::same_bits(ps[w][j], masked[w][j])) differs_from_masked = true;
    }
  }
  EXPECT_TRUE(differs_from_masked);
}

// Buckets split across three servers are sketched and selected per key; with momentum 0
// nothing is lost: W * (applied updates) + the workers' errors = the sum of gradients.
TEST(PsSketchedSgd, SplitKeysConserveTheGradient) {
  const int workers = 2;
  std::vector<std::vector<float>> residuals;
  const Outputs ps =
      run_ps("sketched-sgd:ratio=0.05,rows=3,table=0.2,momentum=0", workers, 3, 500, &residuals);
  std::size_t offset = 0, moved = 0;
  for (std::size_t b = 0; b < kShapes.size(); ++b) {
    if (!kShapes[b].compressible) {
      offset += kShapes[b].numel;
      continue;
    }
    for (std::size_t i = 0; i < kShapes[b].numel; ++i) {
      float total = 0.0f, applied = 0.0f, left = 0.0f;
      for (int step = 1; step < kSteps; ++step) {
        for (int w = 0; w < workers; ++w) total += gradient_of(w, step, b)[i];
        const float a = ps[0][static_cast<std::size_t>(step) * kShapes.size() + b][i];
        applied += a * static_cast<float>(workers);
        moved += a != 0.0f;
      }
      for (int w = 0; w < workers; ++w) left += residuals[static_cast<std::size_t>(w)][offset + i];
      ASSERT_EQ(applied + left, total) << "bucket " << b << " element " << i;
    }
    offset += kShapes[b].numel;
  }
  EXPECT_GT(moved, 50u);
}

TEST(PsSketchedSgd, OtherSchemesAndCompressedDownlinkAreRefused) {
  const std::vector<PsKey> keys = plan_keys(kShapes, 1);
  auto plan_of = [&](std::string spec, Topology t = Topology::kPsSync) {
    PsConfig c;
    c.topology = t;
    c.compressor = std::move(spec);
    return ps::sketch_plan_for(c.method(), keys);
  };
  EXPECT_THROW(plan_of("powersgd:rank=2"), InvalidArgument);
  EXPECT_THROW(plan_of("sketched-sgd:rows=99"), InvalidArgument);
  EXPECT_THROW(plan_of("sketched-sgd", Topology::kPsAsync), InvalidArgument);
  EXPECT_FALSE(plan_of("ef(topk:ratio=0.01)").has_value());
  const auto plan = plan_of("sketched-sgd:k=10,p2=3,rows=3,cols=40");
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->keys[0].k, 10u);
  EXPECT_EQ(plan->keys[0].kc, 30u);
  EXPECT_EQ(plan->keys[1].kc, 1u);  // min(n, p2 k)
  EXPECT_FALSE(plan->keys[4].on);   // the dense bucket
  EXPECT_EQ(plan->cells(0), 120u);

  PsConfig cfg;
  cfg.topology = Topology::kPsSync;
  cfg.servers = 1;
  cfg.workers = 1;
  cfg.compressor = "sketched-sgd";
  cfg.downlink = Downlink::kCompressed;
  run_ranks(2, [&](Communicator& comm) {
    if (comm.rank() == 1) {
      EXPECT_THROW(run_ps_server(cfg, comm, kShapes), InvalidArgument);
    } else {
      EXPECT_THROW(make_ps_worker(cfg, comm, kShapes), InvalidArgument);
    }
  });
}

std::vector<std::byte> u32s(std::initializer_list<std::uint32_t> v) {
  std::vector<std::byte> out(4 * v.size());
  std::size_t t = 0;
  for (std::uint32_t x : v) store_le<std::uint32_t>(out.data() + 4 * t++, x);
  return out;
}

TEST(PsSketchedSgd, CandidateRecordsAreValidated) {
  std::vector<std::uint32_t> out;
  ps::read_indices(u32s({1, 5, 9}), 10, 3, 0, "test", out);
  EXPECT_EQ(out, (std::vector<std::uint32_t>{1, 5, 9}));
  ps::read_indices({}, 10, 3, 0, "test", out);
  EXPECT_TRUE(out.empty());
  EXPECT_THROW(ps::read_indices(u32s({1, 5, 10}), 10, 3, 0, "test", out), CorruptMessage);
  EXPECT_THROW(ps::read_indices(u32s({5, 5}), 10, 3, 0, "test", out), CorruptMessage);
  EXPECT_THROW(ps::read_indices(u32s({6, 5}), 10, 3, 0, "test", out), CorruptMessage);
  EXPECT_THROW(ps::read_indices(u32s({1, 2, 3, 4}), 10, 3, 0, "test", out), CorruptMessage);
  std::vector<std::byte> odd = u32s({1});
  odd.pop_back();
  EXPECT_THROW(ps::read_indices(odd, 10, 3, 0, "test", out), CorruptMessage);
}

TEST(PsSketchedSgd, SparseUpdatesAreValidated) {
  const std::vector<std::uint32_t> cand = {2, 4, 8, 9};
  std::vector<std::uint32_t> idx;
  std::vector<float> val;
  std::vector<std::byte> buf(4 + 8 * 2);
  const std::vector<std::uint32_t> good_idx = {4, 9};
  const std::vector<float> good_val = {1.5f, -2.0f};
  ASSERT_EQ(ps::write_sparse(good_idx, good_val, buf), buf.size());
  ps::read_sparse(buf, cand, 2, 0, "test", idx, val);
  EXPECT_EQ(idx, good_idx);
  EXPECT_EQ(val, good_val);

  auto with = [&](std::vector<std::uint32_t> i, std::vector<float> v) {
    std::vector<std::byte> b(4 + 8 * i.size());
    ps::write_sparse(i, v, b);
    return b;
  };
  EXPECT_THROW(ps::read_sparse(with({3, 9}, {1, 1}), cand, 2, 0, "t", idx, val),
               CorruptMessage);  // 3 is not a candidate
  EXPECT_THROW(ps::read_sparse(with({9, 4}, {1, 1}), cand, 2, 0, "t", idx, val),
               CorruptMessage);  // not ascending
  EXPECT_THROW(ps::read_sparse(with({4, 4}, {1, 1}), cand, 2, 0, "t", idx, val), CorruptMessage);
  EXPECT_THROW(ps::read_sparse(with({2, 4, 8}, {1, 1, 1}), cand, 2, 0, "t", idx, val),
               CorruptMessage);  // more than k
  EXPECT_THROW(ps::read_sparse(with({4}, {NAN}), cand, 2, 0, "t", idx, val), CorruptMessage);
  std::vector<std::byte> truncated = with({4}, {1});
  truncated.pop_back();
  EXPECT_THROW(ps::read_sparse(truncated, cand, 2, 0, "t", idx, val), CorruptMessage);
  EXPECT_THROW(ps::read_sparse({}, cand, 2, 0, "t", idx, val), CorruptMessage);
}

}  // namespace
}  // namespace gradcomp::dist
