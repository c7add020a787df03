// Batches on the device (DeviceCodec::encode_batch / decode_batch): top-k's
// (src/device/codecs/topk_batch.cc) against the one-tensor calls, on CPU tensors: every
// payload byte for byte, every residual and decoded output bit for bit, every refusal in
// the same words. Segments of sizes 0, 1 and odd ones, both sides of the exact selection's
// sample (2^17) and of select=auto's switch (2^18), and gradients whose magnitudes tie or
// whose sampled threshold misses (DGC's 0.8x retries, re-selection). The other codecs'
// batches: checked_batch_device_test.cc. Then the device allgather reducer, which batches
// every device codec (on CPU tensors with GRADCOMP_DEVICE_BATCH=1), against the host
// reducer over real Gloo groups, and against itself one bucket at a time.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "../dist/dist_test_support.h"
#include "batch_test_support.h"
#include "device/codecs/topk_select.h"
#include "device_test_support.h"
#include "gradcomp/device/codec.h"
#include "gradcomp/device/reducer.h"
#include "gradcomp/dist/reducers.h"
#include "gradcomp/error.h"
#include "gradcomp/kernels/select.h"
#include "gradcomp/method.h"
#include "gradcomp/registry.h"
#include "gradcomp/rng.h"

namespace gradcomp::device {
namespace {

using dist::test::run_ranks;
using test::context;
using test::contexts;
using test::decode_alone;
using test::expect_decodes_as_alone;
using test::expect_encodes_as_alone;
using test::expect_same_state;
using test::flat_gradient;
using test::gather;
using test::Gathered;
using test::gradient;
using test::name_of;
using test::outputs;
using test::same_bits;
using Pair = test::CodecPair;
const auto make = test::make_codec_pair;

const std::vector<std::string> kSpecs = {
    "topk",  // select=auto: exact below 2^18, sampled above
    "topk:ratio=0.05,select=exact",
    "topk:ratio=0.01,select=sampled",
    "topk:ratio=0.3,select=sampled,values=fp16",
    "topk:ratio=0.001,values=fp16",
    "topk:ratio=0.002,select=sampled,sample=0.05",
};

// Sizes of one batch's segments: empty, single, odd, and the selections' switches.
const std::vector<std::vector<std::int64_t>> kBatches = {
    {}, {0}, {1, 0, 2, 17}, {4099, 1, 131071, 131073, 33}, {300007, 5, 262143, 262145, 0, 1000},
};

class TopkBatch : public ::testing::TestWithParam<std::string> {};

TEST_P(TopkBatch, EncodesWhatEachSegmentEncodesAlone) {
  const Pair c = make(GetParam());
  ASSERT_TRUE(c.dev->batches());
  at::manual_seed(7);
  for (const std::vector<std::int64_t>& sizes : kBatches) {
    for (int kind = 0; kind < 5; ++kind) {
      const at::Tensor flat = flat_gradient(sizes, kind);
      for (const bool feedback : {true, false}) {
        for (std::uint64_t step = 0; step < 2; ++step) {
          expect_encodes_as_alone(*c.dev, flat, sizes, contexts(sizes.size(), step), feedback,
                                  "batch of " + std::to_string(sizes.size()) + " kind " +
                                      std::to_string(kind) + (feedback ? " feedback" : "") +
                                      " step " + std::to_string(step));
        }
      }
    }
  }
}

TEST(TopkBatchRetries, SpentRetriesFallBackToTheExactTopKAsAlone) {
  // Large values on exactly the lines DGC's sample draws, tiny ones elsewhere: the sampled
  // threshold is the large value, 3,008 entries reach it, and no 0.8x retry (down to 0.11x)
  // reaches the tiny ones, while 0.8k = 12,000: every retry falls short, and the selection
  // is the exact top k of the whole segment.
  const Pair c = make("topk:ratio=0.05,select=sampled");
  const std::int64_t n = 300007;
  const std::vector<std::int64_t> sizes = {4099, n, 17};
  const std::vector<StepContext> ctxs = contexts(sizes.size(), 3);
  const topk_detail::SelectPlan plan = topk_detail::plan_selection(
      n, static_cast<std::int64_t>(kernels::count_for_fraction(0.05, n)), true, 0.01);
  ASSERT_EQ(plan.kind, topk_detail::SelectPlan::Kind::kLines);
  std::vector<std::int64_t> starts(static_cast<std::size_t>(plan.lines));
  topk_detail::draw_line_starts(CounterRng::for_step(ctxs[1], RngScope::kPerRank), plan,
                                starts.data());
  at::Tensor segment = at::rand({n}).mul(1e-30);
  for (const std::int64_t line : starts) segment.narrow(0, line, topk_detail::kLine).fill_(1.0f);
  const at::Tensor flat = at::cat({at::randn({4099}), segment, at::randn({17})});
  const at::Tensor batch_x = flat.clone();
  const at::Tensor alone_x = flat.clone();
  const DeviceCodec::EncodedBatch batch = c.dev->encode_batch(batch_x, sizes, ctxs, true);
  std::int64_t offset = 0;
  std::int64_t at = 0;
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    const at::Tensor payload =
        c.dev->encode_payload_feedback(alone_x.narrow(0, offset, sizes[s]), ctxs[s]);
    EXPECT_TRUE(batch.payloads.narrow(0, at, batch.bytes[s]).equal(payload)) << "segment " << s;
    offset += sizes[s];
    at += batch.bytes[s];
  }
  EXPECT_EQ(batch.bytes[1], 4 + 8 * plan.k) << "not the exact top k";
  EXPECT_TRUE(same_bits(batch_x, alone_x));
}

TEST_P(TopkBatch, RefusesANonFiniteValueAsTheFirstSegmentHoldingOneDoes) {
  const Pair c = make(GetParam());
  const std::vector<std::int64_t> sizes = {1000, 300007, 17, 131073};
  for (const float bad :
       {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    for (const std::int64_t where : {std::int64_t{999}, std::int64_t{1000 + 4567},
                                     std::int64_t{301007 + 3}, std::int64_t{301024 + 131000}}) {
      at::Tensor flat = at::randn({1000 + 300007 + 17 + 131073});
      flat[where] = bad;
      flat[where + 1] = bad;  // a later one, in the same segment or the next
      std::string alone_words;
      std::int64_t offset = 0;
      const std::vector<StepContext> ctxs = contexts(sizes.size(), 0);
      for (std::size_t s = 0; s < sizes.size() && alone_words.empty(); ++s) {
        try {
          (void)c.dev->encode_payload(flat.narrow(0, offset, sizes[s]), ctxs[s]);
        } catch (const InvalidArgument& e) {
          alone_words = e.what();
        }
        offset += sizes[s];
      }
      ASSERT_FALSE(alone_words.empty());
      try {
        (void)c.dev->encode_batch(flat.clone(), sizes, ctxs, true);
        FAIL() << "accepted a non-finite value at " << where;
      } catch (const InvalidArgument& e) {
        EXPECT_EQ(std::string(e.what()), alone_words);
      }
    }
  }
}

// With values=fp16 a payload is 4 + 6c bytes, so the next one starts 2 bytes off a word:
// the one-payload decode copies it before viewing its fields (it threw before).
TEST_P(TopkBatch, DecodesWhatEachPayloadDecodesAlone) {
  const Pair c = make(GetParam());
  at::manual_seed(9);
  expect_decodes_as_alone(*c.dev, kBatches);
}

TEST_P(TopkBatch, RefusesWhatTheOnePayloadDecodeRefusesInItsWords) {
  const Pair c = make(GetParam());
  at::manual_seed(13);
  const std::vector<std::int64_t> sizes = {4099, 17, 300007};
  const Gathered clean = gather(*c.dev, sizes, 2);
  const std::int64_t entry = GetParam().find("fp16") != std::string::npos ? 6 : 8;
  // (payload, byte within it, new value): the count field, an index beyond n, an index
  // not above the previous one, a non-finite value.
  struct Mutation {
    std::size_t payload;
    std::int64_t byte;
    int value;
  };
  std::vector<Mutation> mutations = {{0, 0, 0x7F}, {3, 7, 0x7F}, {5, 4 + 4, 0}};
  if (clean.bytes[4] > 4 + entry) mutations.push_back({4, clean.bytes[4] - 1, 0xFF});
  for (const Mutation& m : mutations) {
    if (m.byte >= clean.bytes[m.payload]) continue;
    Gathered g = clean;
    g.payloads = clean.payloads.clone();
    g.payloads[clean.offsets[m.payload] + m.byte] = m.value;
    std::string alone_words;
    try {
      decode_alone(*c.dev, g, outputs(sizes), 0.5f);
    } catch (const CorruptMessage& e) {
      alone_words = e.what();
    }
    if (alone_words.empty()) continue;  // a mutation the format accepts
    try {
      c.dev->decode_batch(g.payloads, g.offsets, g.bytes, outputs(sizes), 0.5f);
      ADD_FAILURE() << "accepted payload " << m.payload << " mutated at " << m.byte;
    } catch (const CorruptMessage& e) {
      EXPECT_EQ(std::string(e.what()), alone_words);
    }
  }
  // A payload cut short: its length no longer fits a count.
  Gathered cut = clean;
  cut.bytes[2] -= 1;
  EXPECT_THROW(c.dev->decode_batch(cut.payloads, cut.offsets, cut.bytes, outputs(sizes), 1.0f),
               CorruptMessage);
}

TEST_P(TopkBatch, RandomlyMutatedBatchesAreDecodedAsOnePayloadAtATime) {
  const Pair c = make(GetParam());
  at::manual_seed(17);
  test::expect_mutated_batches_as_alone(*c.dev, {257, 33, 1, 0, 4099}, 60, 5);
}

INSTANTIATE_TEST_SUITE_P(Specs, TopkBatch, ::testing::ValuesIn(kSpecs),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return name_of(p.param);
                         });

TEST(DeviceBatch, MisshapenBatchesAreRefusedWithOneLine) {
  const Pair c = make("topk");
  const std::vector<std::int64_t> sizes = {3, 4};
  EXPECT_THROW((void)c.dev->encode_batch(at::zeros({8}), sizes, contexts(2, 0), true),
               InvalidArgument);
  EXPECT_THROW((void)c.dev->encode_batch(at::zeros({7}), sizes, contexts(1, 0), true),
               InvalidArgument);
  EXPECT_THROW((void)c.dev->encode_batch_with_residual(at::zeros({7}), at::zeros({8}), sizes,
                                                       contexts(2, 0)),
               InvalidArgument);
  EXPECT_THROW((void)c.dev->encode_batch_with_residual(at::zeros({7}), at::zeros({7}), sizes,
                                                       contexts(1, 0)),
               InvalidArgument);
  const std::vector<std::int64_t> offsets = {0, 4};
  const std::vector<std::int64_t> bytes = {4, 9};
  const std::vector<at::Tensor> outs = {at::zeros({3}), at::zeros({4})};
  EXPECT_THROW(c.dev->decode_batch(at::zeros({12}, at::kByte), offsets, bytes, outs, 1.0f),
               InvalidArgument);
}

// ---- the reducer: batched top-k against the host reducer and against one bucket at a time

// ResNet-like buckets: many small compressible tensors between dense ones, two over the
// exact selection's sample, one over select=auto's switch, an empty one.
const std::vector<BucketShape> kShapes = {
    {0, 4096, true, 64},    {1, 64, false, 0},  {2, 36864, true, 64}, {3, 0, true, 0},
    {4, 147456, true, 128}, {5, 128, false, 0}, {6, 300007, true, 0}, {7, 1, true, 0},
    {8, 131072, true, 256}, {9, 2049, true, 0},
};
constexpr int kSteps = 4;

std::vector<at::Tensor> step_gradients(int rank, int step) {
  at::manual_seed(1000 * static_cast<std::uint64_t>(rank) + static_cast<std::uint64_t>(step));
  std::vector<at::Tensor> out;
  for (std::size_t b = 0; b < kShapes.size(); ++b) {
    out.push_back(
        gradient(static_cast<std::int64_t>(kShapes[b].numel), static_cast<int>(b) + step));
  }
  return out;
}

StepContext reducer_context(int step) {
  StepContext c;
  c.seed = 3;
  c.step = static_cast<std::uint64_t>(step);
  c.lr = 0.1f;
  c.momentum = 0.9f;
  return c;
}

// The host reducer and two device reducers (batched, and one bucket at a time) on one
// rank for kSteps steps (step 2 dense for all), compared after each.
void check_reducers(const std::string& spec, dist::Communicator& comm) {
  const Method method = Method::parse(spec);
  auto host = dist::make_reducer(method, comm, kShapes);
  // On CPU tensors the reducer batches only when asked to.
  ::setenv("GRADCOMP_DEVICE_BATCH", "1", 1);
  auto batched = make_device_reducer(method, comm, kShapes, at::Device(at::kCPU));
  ::unsetenv("GRADCOMP_DEVICE_BATCH");
  auto alone = make_device_reducer(method, comm, kShapes, at::Device(at::kCPU));
  for (int t = 0; t < kSteps; ++t) {
    const std::string where =
        spec + " rank " + std::to_string(comm.rank()) + " step " + std::to_string(t);
    const std::vector<at::Tensor> g = step_gradients(comm.rank(), t);
    std::vector<float> arena;
    // The batched reducer's buckets are views of one tensor, as a DDP bucket's slots are;
    // the other's are tensors of their own.
    const at::Tensor joined = at::cat(g);
    std::vector<at::Tensor> a, b;
    std::int64_t at = 0;
    for (const at::Tensor& x : g) {
      arena.insert(arena.end(), x.data_ptr<float>(), x.data_ptr<float>() + x.numel());
      a.push_back(joined.narrow(0, at, x.numel()));
      b.push_back(x.clone());
      at += x.numel();
    }
    std::vector<BucketRef> refs;
    std::unique_ptr<bool[]> flags(new bool[kShapes.size()]);
    std::size_t offset = 0;
    for (std::size_t i = 0; i < kShapes.size(); ++i) {
      flags[i] = t != 2 && kShapes[i].compressible;
      refs.push_back(
          {kShapes[i].id, std::span<float>(arena).subspan(offset, kShapes[i].numel), flags[i]});
      offset += kShapes[i].numel;
    }
    const std::span<const bool> compressed(flags.get(), kShapes.size());
    host->reduce(refs, reducer_context(t));
    batched->reduce(a, compressed, reducer_context(t));
    alone->reduce(b, compressed, reducer_context(t));
    for (std::size_t i = 0; i < kShapes.size(); ++i) {
      const at::Tensor h = at::tensor(std::vector<float>(refs[i].grad.begin(), refs[i].grad.end()));
      EXPECT_TRUE(same_bits(a[i], h)) << where << " bucket " << i << " (batched)";
      EXPECT_TRUE(same_bits(b[i], h)) << where << " bucket " << i << " (one at a time)";
    }
    expect_same_state(host->state(), batched->state(), where);
    EXPECT_EQ(host->take_stats().bytes_sent, batched->take_stats().bytes_sent) << where;
    (void)alone->take_stats();
  }
}

class BatchedReducer : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchedReducer, ReducesAsTheHostReducerAndAsOneBucketAtATime) {
  for (const int world : {1, 2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    run_ranks(world, [&](dist::Communicator& comm) { check_reducers(GetParam(), comm); });
  }
}

INSTANTIATE_TEST_SUITE_P(
    Methods, BatchedReducer,
    ::testing::Values("ef(topk)", "efm(topk:ratio=0.02,select=sampled)",
                      "noef(topk:ratio=0.05,values=fp16)", "topk:ratio=0.001,select=exact", "2bit",
                      "efm(2bit:threshold=0.5)", "ef(1bit)", "efm(signsgd)",
                      "ef(efsign:block=1024)", "efm(int:bits=3,block=5)", "dgc:density=0.01",
                      "dgc:density=0.02,select=exact,nesterov=1,clip=5"),
    [](const ::testing::TestParamInfo<std::string>& p) { return name_of(p.param); });

}  // namespace
}  // namespace gradcomp::device
