// The cost model (src/advise): collective formulas against their closed forms, message
// sizes against the codecs' real encodes, the ranking's two ends, bad inputs refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "gradcomp/advise/collectives.h"
#include "gradcomp/advise/messages.h"
#include "gradcomp/advise/models.h"
#include "gradcomp/advise/report.h"
#include "gradcomp/advise/speeds.h"
#include "gradcomp/advise/step_model.h"
#include "gradcomp/advise/sweep.h"
#include "gradcomp/error.h"
#include "gradcomp/memory.h"
#include "gradcomp/registry.h"

namespace gradcomp::advise {
namespace {

TEST(AdviseCollectives, ClosedForms) {
  const Link link{.bandwidth = 1e6, .latency = 1e-3, .collective_overhead = 0.0};
  // Gloo's ring pass: max(n s/beta + 2 alpha, ceil(n/2) (2 alpha + s/beta)).
  EXPECT_DOUBLE_EQ(ring_pass_seconds(6, 125000, link), 6 * 0.125 + 2e-3);  // wire-bound
  EXPECT_DOUBLE_EQ(ring_pass_seconds(6, 1000, link), 3 * (2e-3 + 1e-3));   // notice-bound
  EXPECT_DOUBLE_EQ(ring_pass_seconds(5, 1000, link), 3 * (2e-3 + 1e-3));   // odd: ceil
  EXPECT_EQ(ring_pass_seconds(0, 1000, link), 0.0);
  // Allreduce, W = 4, 1 MB: 8 segments of 125 kB, two passes of 6: 2(W-1)/W * B/beta
  // on the wire.
  EXPECT_DOUBLE_EQ(allreduce_seconds(1e6, 4, link), 2 * (6 * 0.125 + 2e-3));
  EXPECT_DOUBLE_EQ(allreduce_bytes(1e6, 4), 1.5e6);
  EXPECT_DOUBLE_EQ(allreduce_seconds(8e5, 2, link), 2 * (2 * 0.2 + 2e-3));
  // A small buffer is latency-bound: 8 kB at W = 4, two passes of 3 notice rounds.
  EXPECT_DOUBLE_EQ(allreduce_seconds(8000, 4, link), 2 * 3 * (2e-3 + 1e-3));
  // Segments of at most 1 MiB: 10 MiB at W = 2 is 10 segments, passes of 5.
  const double mib = 1024.0 * 1024.0;
  EXPECT_DOUBLE_EQ(allreduce_seconds(10 * mib, 2, link),
                   2 * std::max(5 * mib / 1e6 + 2e-3, 3 * (2e-3 + mib / 1e6)));
  // Allgather: one pass of 2(W-1) half messages, (W-1) m/beta on the wire.
  EXPECT_DOUBLE_EQ(allgather_seconds(1e5, 8, link), 14 * 0.05 + 2e-3);
  EXPECT_DOUBLE_EQ(allgather_bytes(1e5, 8), 7e5);
  EXPECT_DOUBLE_EQ(allgather_seconds(8, 2, link), 2e-3 + 2 * 4e-6);
  // PS: max(1, W/S) * (push + pull)/beta + 2 alpha
  EXPECT_DOUBLE_EQ(ps_seconds(1e6, 1e6, 8, 2, link), 4 * 2.0 + 2e-3);
  EXPECT_DOUBLE_EQ(ps_seconds(1e6, 1e6, 2, 4, link), 2.0 + 2e-3);
  // One worker, or nothing to send: free, overhead included.
  const Link costly{.bandwidth = 1e6, .latency = 1e-3, .collective_overhead = 5e-3};
  EXPECT_EQ(allreduce_seconds(1e6, 1, costly), 0.0);
  EXPECT_EQ(allgather_seconds(0.0, 4, costly), 0.0);
  EXPECT_DOUBLE_EQ(allreduce_seconds(1e6, 4, costly), 1.5 + 4e-3 + 5e-3);
  // Halving-doubling: the same bytes, ceil(log2 W) latency steps per phase.
  Link hd = link;
  hd.algorithm = Algorithm::kHalvingDoubling;
  EXPECT_DOUBLE_EQ(allreduce_seconds(1e6, 8, hd), 2.0 * 7 / 8 * 1.0 + 2 * 3 * 1e-3);
  EXPECT_DOUBLE_EQ(allreduce_seconds(1e6, 6, hd), 2.0 * 5 / 6 * 1.0 + 2 * 3 * 1e-3);
  EXPECT_DOUBLE_EQ(allgather_seconds(1e5, 1024, hd), 1023 * 0.1 + 10 * 1e-3);
  // Efficiency divides the bandwidth.
  Link slow = link;
  slow.efficiency = 0.5;
  EXPECT_DOUBLE_EQ(allreduce_seconds(1e6, 4, slow), 2.0 * 1.5 + 4e-3);
  // Allgathered bytes grow with W, allreduced ones stay under 2B.
  EXPECT_GT(allgather_bytes(1e5, 1024), 100 * allgather_bytes(1e5, 8));
  EXPECT_LT(allreduce_bytes(1e6, 1024), 2e6);
}

// The bytes of an independent encode: a fresh memory, a different input (sizes of these
// specs do not depend on the values).
std::size_t real_encode(const std::string& spec, std::size_t n) {
  const auto memory = builtin_registry().make_memory(spec, n);
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i) g[i] = std::sin(0.37f * static_cast<float>(i)) - 0.1f;
  std::vector<std::byte> out(memory->codec().max_encoded_bytes(n));
  StepContext ctx;
  ctx.seed = 99;
  return memory->compress(g, ctx, out);
}

TEST(AdviseMessages, SizesAreTheCodecsRealEncodes) {
  const std::vector<std::string> specs = {
      "topk:ratio=0.01",    "ef(topk:ratio=0.001)", "qsgd", "2bit", "efsign", "terngrad", "fp16",
      "randomk:ratio=0.05", "dgc:density=0.001"};
  for (const std::string& spec : specs) {
    for (std::size_t n : {0u, 1u, 2u, 7u, 511u, 1023u, 1025u, 4097u, 100003u}) {
      EXPECT_EQ(encoded_bytes(builtin_registry(), spec, n), real_encode(spec, n))
          << spec << " n=" << n;
    }
  }
  // Through a plan: one compressible tensor, nothing dense.
  PlanOptions po;
  po.layout.min_elements = 0;
  po.layout.dense_share = 0.0;
  for (std::size_t n : {1u, 3u, 1025u, 99999u}) {
    const std::vector<ParamInfo> one = {
        {"w", static_cast<std::int64_t>(n), 2, static_cast<std::int64_t>(n)}};
    const MethodPlan topk = plan_method("topk:ratio=0.01", one, po);
    ASSERT_EQ(topk.family, "allgather");
    EXPECT_EQ(topk.rounds.back().bytes, static_cast<double>(real_encode("topk:ratio=0.01", n)));
    const MethodPlan rk = plan_method("randomk:ratio=0.05", one, po);
    ASSERT_EQ(rk.family, "allreduce");
    const auto codec = builtin_registry().make_codec_of("randomk:ratio=0.05");
    EXPECT_EQ(rk.rounds.front().bytes, 4.0 * static_cast<double>(codec->linear_region(n).count));
  }
}

TEST(AdviseMessages, SchemesFromTheirParameters) {
  PlanOptions po;
  po.layout.min_elements = 0;
  po.layout.dense_share = 0.0;
  // A 1536 x 784 matrix and a bias of 10 (dense: dim 1).
  const std::vector<ParamInfo> ps = {{"w", 1536 * 784, 2, 1536}, {"b", 10, 1, 10}};
  const MethodPlan p = plan_method("powersgd:rank=4", ps, po);
  ASSERT_EQ(p.rounds.size(), 2u);
  EXPECT_EQ(p.rounds[0].bytes, 4.0 * (1536 * 4 + 10));  // P and the dense bias
  EXPECT_EQ(p.rounds[1].bytes, 4.0 * (784 * 4));        // Q
  EXPECT_TRUE(p.ps_rounds.empty());
  const MethodPlan s = plan_method("sketched-sgd:rows=5,cols=1000,k=50,p2=4", ps, po);
  ASSERT_EQ(s.rounds.size(), 2u);
  EXPECT_EQ(s.rounds[0].bytes, 4.0 * (5 * 1000 + 10));
  EXPECT_EQ(s.rounds[1].bytes, 4.0 * 200);
  const MethodPlan f = plan_method("fetchsgd:rows=5,cols=1000,k=50", ps, po);
  ASSERT_EQ(f.rounds.size(), 1u);
  EXPECT_EQ(f.rounds[0].bytes, 4.0 * (5 * 1000 + 10));
  const MethodPlan d = plan_method("none", ps, po);
  EXPECT_EQ(d.rounds[0].bytes, 4.0 * (1536 * 784 + 10));
}

// Every built-in scheme says what it sends (its registry entry's traffic hook), consistently
// with what its description says about the parameter server.
TEST(AdviseMessages, EverySchemeDescribesItsTraffic) {
  const std::vector<ParamInfo> mlp = builtin_model("mlp").params;
  for (const SchemeDescription* d : builtin_registry().schemes()) {
    ASSERT_TRUE(d->traffic) << d->name;
    const MethodPlan m = plan_method(d->name, mlp);
    EXPECT_EQ(m.family, d->name);
    EXPECT_TRUE(m.traits.scheme && m.traits.all_allreduce) << d->name;
    EXPECT_FALSE(m.traits.dense || m.traits.overlappable || m.traits.decode_per_peer) << d->name;
    EXPECT_GT(m.compressed_elements, 0u) << d->name;
    EXPECT_EQ(m.ps_rounds.empty(), !d->runs_on_ps_sync) << d->name;
    EXPECT_EQ(m.ps_note.empty(), d->runs_on_ps_sync) << d->name;
    EXPECT_FALSE(m.fallback.source.empty()) << d->name;
  }
}

// The cost model plans, times and ranks a scheme it has never heard of from its registry
// entry alone: nothing in it names a scheme.
TEST(AdviseMessages, ASchemeIsCostedFromItsRegistryEntry) {
  CodecRegistry r;
  register_builtin_codecs(r);
  r.add_scheme({.name = "halves",
                .summary = "allreduces half of each compressed bucket",
                .params = {int_param("rounds", 1, 1, 4, "allreduces per step")},
                .examples = {},
                .traffic = [](const Params& p, std::span<const BucketPlan> buckets) {
                  SchemeTraffic t;
                  double half = 0.0;
                  for (const BucketPlan& b : buckets) {
                    half += 2.0 * static_cast<double>(b.numel);
                    if (b.compressible) t.compressed_elements += b.numel;
                  }
                  for (std::int64_t i = 0; i < p.get_int("rounds"); ++i) {
                    t.rounds.push_back({"half", Collective::kAllreduce, half});
                  }
                  t.server_note = "halves: allreduce only";
                  t.fallback = {1e-9, 2e-9, "made up"};
                  return t;
                }});
  const std::vector<ParamInfo> ps = {{"w", 1000 * 100, 2, 1000}, {"b", 10, 1, 10}};
  PlanOptions po;
  po.layout.min_elements = 0;
  po.layout.dense_share = 0.0;
  const MethodPlan m = plan_method("halves:rounds=2", ps, po, r);
  EXPECT_EQ(m.canonical, "halves:rounds=2");
  EXPECT_EQ(m.family, "halves");
  EXPECT_TRUE(m.traits.scheme);
  ASSERT_EQ(m.rounds.size(), 2u);
  EXPECT_EQ(m.rounds[1].bytes, 2.0 * (100000 + 10));
  EXPECT_EQ(m.compressed_elements, 100000u);
  const CodecSpeed speed = speed_of(m, SpeedTable{});
  EXPECT_EQ(speed.encode, 1e-9);
  EXPECT_EQ(speed.source, "made up");
  Scenario s;
  s.topology = Topology::kPsSync;
  const Prediction p = predict(m, s, SpeedTable{});
  EXPECT_FALSE(p.available);
  EXPECT_EQ(p.note, "halves: allreduce only");
}

// What the step model asks of a codec's or dense's plan.
TEST(AdviseMessages, CodecAndDenseTraits) {
  const std::vector<ParamInfo> mlp = builtin_model("mlp").params;
  const PlanTraits topk = plan_method("topk:ratio=0.01", mlp).traits;
  EXPECT_FALSE(topk.all_allreduce || topk.overlappable || topk.dense || topk.scheme);
  EXPECT_TRUE(topk.decode_per_peer);
  const PlanTraits rk = plan_method("randomk", mlp).traits;
  EXPECT_TRUE(rk.all_allreduce && rk.overlappable);
  EXPECT_FALSE(rk.decode_per_peer || rk.dense || rk.scheme);
  for (const char* dense : {"none", "dense"}) {
    const MethodPlan d = plan_method(dense, mlp);
    EXPECT_TRUE(d.traits.dense && d.traits.all_allreduce && d.traits.overlappable) << dense;
    EXPECT_EQ(d.family, "dense");
  }
  // A wrapped none is planned as the linear codec it is written as.
  EXPECT_FALSE(plan_method("ef(none)", mlp).traits.dense);
}

// The trainer exchanges groups of buckets (layout.h's exchange_groups), each its own set
// of collectives. At 1 MiB (dense's default): the MLP's fc2 alone, then fc1 with the dense
// bucket; at 25 MiB (a compressed method's default): one group.
TEST(AdviseMessages, OneSetOfCollectivesPerExchangeGroup) {
  const std::vector<ParamInfo> mlp = builtin_model("mlp").params;
  const MethodPlan d = plan_method("none", mlp);
  ASSERT_EQ(d.rounds.size(), 2u);
  ASSERT_EQ(d.dense_rounds.size(), 2u);
  EXPECT_EQ(d.rounds[0].bytes, 4.0 * 1536 * 1536);
  EXPECT_EQ(d.rounds[0].bytes + d.rounds[1].bytes, d.gradient_bytes);
  PlanOptions small;
  small.min_group_mb = 1.0;
  const MethodPlan t = plan_method("topk:ratio=0.01", mlp, small);
  ASSERT_EQ(t.rounds.size(), 5u);  // sizes, messages; dense, sizes, messages
  EXPECT_EQ(t.rounds[0].kind, Collective::kAllgather);
  EXPECT_EQ(t.rounds[2].kind, Collective::kAllreduce);
  EXPECT_NE(t.rounds[2].what.find("group 2"), std::string::npos) << t.rounds[2].what;
  EXPECT_EQ(t.rounds[1].bytes + t.rounds[4].bytes, t.message_bytes);
  EXPECT_EQ(plan_method("powersgd:rank=2", mlp, small).rounds.size(), 4u);  // P, Q per group
  // The default for a compressed method: one group, the same bytes in fewer collectives.
  const MethodPlan t1 = plan_method("topk:ratio=0.01", mlp);
  EXPECT_EQ(t1.rounds.size(), 3u);
  EXPECT_EQ(t1.rounds[2].bytes, t.message_bytes);
  EXPECT_EQ(plan_method("powersgd:rank=2", mlp).rounds.size(), 2u);
  // Dense's default stays 1 MiB, given explicitly or not.
  PlanOptions big;
  big.min_group_mb = 1000;
  EXPECT_EQ(plan_method("none", mlp, big).rounds.size(), 1u);
}

// The sketch schemes are costed as the count sketch codec of their geometry.
TEST(AdviseSpeeds, SketchSchemesAsTheirCountSketch) {
  const std::vector<ParamInfo> mlp = builtin_model("mlp").params;
  const MethodPlan f = plan_method("fetchsgd:rows=3,table=0.06,ratio=0.002", mlp);
  EXPECT_EQ(f.speed_spec.rfind("sketch:rows=3,ratio=0.06", 0), 0u) << f.speed_spec;
  EXPECT_NE(f.speed_spec.find(",heavy=0.002"), std::string::npos) << f.speed_spec;
  const MethodPlan s = plan_method("sketched-sgd:ratio=0.01,p2=4", mlp);
  EXPECT_NE(s.speed_spec.find(",heavy=0.04"), std::string::npos) << s.speed_spec;
  EXPECT_NO_THROW(builtin_registry().make_codec_of(f.speed_spec));
  EXPECT_NO_THROW(builtin_registry().make_codec_of(s.speed_spec));
  SpeedTable t;
  t.set(f.speed_spec, {2e-9, 3e-9, "bench"});
  const CodecSpeed got = speed_of(f, t);
  EXPECT_EQ(got.encode, 2e-9);
  EXPECT_EQ(got.decode, 3e-9);
  EXPECT_EQ(got.source, "as " + f.speed_spec);
  // Not measured: the lab's constants.
  EXPECT_EQ(speed_of(s, t).source, "fetchsgd's lab constant");
  EXPECT_TRUE(plan_method("powersgd", mlp).speed_spec.empty());
}

// A scheme's own timing (`gradcomp bench scheme --json`) wins over its approximations,
// found by the spec as given or by its canonical spec.
TEST(AdviseSpeeds, SchemesTimedThemselves) {
  const std::vector<ParamInfo> mlp = builtin_model("mlp").params;
  const MethodPlan s = plan_method("sketched-sgd", mlp);
  const MethodPlan p = plan_method("powersgd:rank=2", mlp);
  SpeedTable t = parse_bench_json(
      "{\"kind\":\"scheme\",\"spec\":\"sketched-sgd\",\"canonical\":\"" + s.canonical +
      "\",\"model\":\"mlp\",\"n\":2000000,\"encode_ms\":30,\"decode_ms\":10}\n"
      "{\"kind\":\"scheme\",\"spec\":\"x\",\"canonical\":\"" +
      p.canonical + "\",\"n\":1000,\"encode_ms\":0.004,\"decode_ms\":0.002}\n");
  t.set(s.speed_spec, {1.0, 1.0, "bench"});  // the count sketch proxy: not used
  EXPECT_DOUBLE_EQ(speed_of(s, t).encode, 15e-9);
  EXPECT_DOUBLE_EQ(speed_of(s, t).decode, 5e-9);
  EXPECT_EQ(speed_of(s, t).source, "file");
  EXPECT_DOUBLE_EQ(speed_of(p, t).encode, 4e-9);  // by its canonical spec
  EXPECT_EQ(speed_of(plan_method("powersgd", mlp), t).source, "lab constant");
  EXPECT_THROW(parse_bench_json("{\"kind\":\"scheme\",\"spec\":\"powersgd\",\"n\":5}"),
               InvalidArgument);
  // A negative time would predict a step faster than dense.
  EXPECT_THROW(parse_bench_json("{\"kind\":\"codec\",\"spec\":\"topk\",\"n\":5,"
                                "\"encode_ms\":-1,\"decode_ms\":1}"),
               InvalidArgument);
  // A timing of the MLP's buckets is not ResNet-50's; codec rows (no model) are anyone's.
  const std::string two_models =
      "{\"kind\":\"scheme\",\"spec\":\"sketched-sgd\",\"model\":\"mlp\",\"n\":1000,"
      "\"encode_ms\":1,\"decode_ms\":1}\n"
      "{\"kind\":\"scheme\",\"spec\":\"sketched-sgd\",\"model\":\"resnet50\",\"n\":1000,"
      "\"encode_ms\":2,\"decode_ms\":2}\n"
      "{\"kind\":\"codec\",\"spec\":\"qsgd\",\"n\":1000,\"encode_ms\":3,\"decode_ms\":3}\n";
  EXPECT_DOUBLE_EQ(parse_bench_json(two_models, "mlp").find("sketched-sgd")->encode, 1e-6);
  EXPECT_DOUBLE_EQ(parse_bench_json(two_models, "resnet50").find("sketched-sgd")->encode, 2e-6);
  EXPECT_EQ(parse_bench_json(two_models, "lenet5").find("sketched-sgd"), nullptr);
  EXPECT_NE(parse_bench_json(two_models, "lenet5").find("qsgd"), nullptr);
  EXPECT_DOUBLE_EQ(speed_of(p, t).encode, 4e-9);  // its row names no model
}

TEST(AdviseModels, ParameterCounts) {
  EXPECT_EQ(builtin_model("mlp").numel(), 3'581'962);
  EXPECT_EQ(builtin_model("lenet5").numel(), 61'706);
  // tests/train/models_test.cc: 269,722 with 3 input channels; 1 channel: 2 * 16 * 9 fewer.
  EXPECT_EQ(builtin_model("resnet20").numel(), 269'722 - 288);
  EXPECT_EQ(builtin_model("resnet50").numel(), 25'557'032);  // torchvision's
  EXPECT_EQ(builtin_model("resnet50").params.size(), 161u);
  // tests/train/models_test.cc: the LM on 256 byte values, context 64.
  EXPECT_EQ(builtin_model("transformer").numel(), 834'304);
  EXPECT_EQ(builtin_model("transformer").params.size(), 52u);
  const ModelSizes s = parse_sizes("1000, 784x1536\n# a comment\n64x3x7x7");
  ASSERT_EQ(s.params.size(), 3u);
  EXPECT_EQ(s.params[1].numel, 784 * 1536);
  EXPECT_EQ(s.params[1].rows, 784);
  EXPECT_EQ(s.params[2].dim, 4);
}

Scenario scenario(double bandwidth) {
  Scenario s;
  s.workers = 8;
  s.link = {.bandwidth = bandwidth, .latency = 0.0, .collective_overhead = 0.0};
  s.compute_s = 0.03;
  return s;
}

std::vector<MethodPlan> plans() {
  const ModelSizes m = builtin_model("mlp");
  std::vector<MethodPlan> out;
  for (const char* spec : {"topk:ratio=0.01", "none", "powersgd:rank=2", "qsgd"}) {
    out.push_back(plan_method(spec, m.params));
  }
  return out;
}

SpeedTable speeds() {
  SpeedTable t;
  t.set("topk:ratio=0.01", {2e-9, 1e-10, "test"});
  t.set("qsgd", {1e-9, 2e-9, "test"});
  return t;
}

TEST(AdviseRanking, DenseFirstOnAHugeLinkACompressorOnATinyOne) {
  const auto fast = predict_all(plans(), scenario(1e13), speeds());
  EXPECT_EQ(fast.front().spec, "none");
  EXPECT_EQ(fast.front().rank, 1);
  EXPECT_DOUBLE_EQ(fast.front().speedup, 1.0);
  const auto slow = predict_all(plans(), scenario(1e6), speeds());
  EXPECT_NE(slow.front().spec, "none");
  EXPECT_EQ(slow.back().spec, "none");
  EXPECT_GT(slow.front().speedup, 10.0);
  for (std::size_t i = 1; i < slow.size(); ++i) EXPECT_LE(slow[i - 1].step_s, slow[i].step_s);
}

TEST(AdviseStepModel, OversubscriptionOverlapAndPs) {
  const auto ps = plans();
  Scenario s = scenario(125e6);
  const Prediction alone = predict(ps[1], s, speeds());
  s.cores = 2;  // 8 workers on 2 cores: compute x4
  const Prediction shared = predict(ps[1], s, speeds());
  EXPECT_DOUBLE_EQ(shared.compute_s, 4 * alone.compute_s);
  // ... and every ring hop waits for a worker to be scheduled: alpha + delay * (f - 1).
  s.oversubscribed_hop_delay = 1e-3;
  const Prediction waits = predict(ps[1], s, speeds());
  s.oversubscribed_hop_delay = 0.0;
  s.link.latency += 3e-3;
  const Prediction slower_link = predict(ps[1], s, speeds());
  EXPECT_GT(waits.comm_s, shared.comm_s);
  EXPECT_DOUBLE_EQ(waits.comm_s, slower_link.comm_s);
  s.link.latency -= 3e-3;
  s.cores = 8;  // a core each: no wait
  s.oversubscribed_hop_delay = 1e-3;
  EXPECT_DOUBLE_EQ(predict(ps[1], s, speeds()).comm_s, alone.comm_s);
  s.oversubscribed_hop_delay = kOversubscribedHopDelay;
  s.cores = 0;
  s.overlap = 1.0;
  const Prediction hidden = predict(ps[1], s, speeds());
  EXPECT_DOUBLE_EQ(hidden.exposed_s, std::max(0.0, alone.comm_s - s.backward_share * s.compute_s));
  // Allgathered messages are not overlapped.
  EXPECT_DOUBLE_EQ(predict(ps[0], s, speeds()).exposed_s, predict(ps[0], s, speeds()).comm_s);
  s.overlap = 0.0;
  s.topology = Topology::kPsSync;
  s.servers = 8;
  const Prediction dense_ps = predict(ps[1], s, speeds());
  EXPECT_DOUBLE_EQ(dense_ps.comm_s, 2 * ps[1].gradient_bytes / 125e6);
  EXPECT_FALSE(predict(ps[2], s, speeds()).available);  // powersgd: allreduce only
}

// An outer loop pays one exchange of the whole model every H steps: (step - compute) * H
// is the per-step method's exchange when that is one group too; a delay of D steps hides
// what D steps of compute cover; fragments spread the same bytes over the H steps.
TEST(AdviseStepModel, OuterLoopsPayTheirExchangeOnceEveryHSteps) {
  const ModelSizes m = builtin_model("mlp");
  const Scenario s = scenario(12.5e6);
  const Prediction per_step = predict(plan_method("topk:ratio=0.01", m.params), s, speeds());
  const MethodPlan plan = plan_method("topk:ratio=0.01+--sync-every=30", m.params);
  EXPECT_EQ(plan.spec, "topk:ratio=0.01");
  EXPECT_EQ(plan.outer.sync_every, 30);
  ASSERT_EQ(plan.fragments.size(), 1u);
  const Prediction outer = predict(plan, s, speeds());
  EXPECT_EQ(outer.spec, "topk:ratio=0.01+--sync-every=30");
  // ... and each round's check that the ranks took the same inner steps: two small
  // allgathers (dist::OuterLoop::check_round_agrees).
  const double check_s =
      allgather_seconds(8.0, s.workers, s.link) + allgather_seconds(64.0, s.workers, s.link);
  const double check_bytes = allgather_bytes(8.0, s.workers) + allgather_bytes(64.0, s.workers);
  EXPECT_GT(check_s, 0.0);
  EXPECT_NEAR((outer.step_s - outer.compute_s) * 30, per_step.step_s - per_step.compute_s + check_s,
              1e-9);
  EXPECT_NEAR(outer.bytes_sent * 30, per_step.bytes_sent + check_bytes, 1e-6);
  ASSERT_GE(outer.rounds.size(), 2u);
  EXPECT_NE(outer.rounds[1].what.find("inner-step check"), std::string::npos);
  // A delay longer than the exchange hides it all.
  const Prediction hidden =
      predict(plan_method("none+--sync-every=30+--delay=29", m.params), scenario(1e13), speeds());
  EXPECT_DOUBLE_EQ(hidden.step_s, hidden.compute_s);
  // Two fragments: about the same bytes per step, each fragment one job.
  const MethodPlan two =
      plan_method("none+--sync-every=30+--fragments=2+--outer=average", m.params);
  EXPECT_EQ(two.fragments.size(), 2u);
  const Prediction dense_outer =
      predict(plan_method("none+--sync-every=30", m.params), s, speeds());
  EXPECT_NEAR(predict(two, s, speeds()).bytes_sent, dense_outer.bytes_sent + check_bytes / 30,
              1e-6);
  Scenario ps = s;
  ps.topology = Topology::kPsSync;
  EXPECT_FALSE(predict(plan, ps, speeds()).available);
  for (const char* bad :
       {"none+--sync-every=0", "none+--sync-every=30+--fragments=7",
        "none+--sync-every=30+--delay=30", "none+--sync-every=x", "none+--workers=3"}) {
    EXPECT_THROW((void)plan_method(bad, m.params), InvalidArgument) << bad;
  }
}

// The scatter reducer: a ring allreduce's bytes for any codec's message, three one-way
// latencies; per step or under an outer loop; what the method refuses, refused.
TEST(AdviseMessages, TheScatterReducer) {
  const Link link{.bandwidth = 1e6, .latency = 1e-3, .collective_overhead = 0.0};
  EXPECT_DOUBLE_EQ(scatter_seconds(1e6, 4, link), 1.5 + 3e-3);
  EXPECT_DOUBLE_EQ(scatter_bytes(1e6, 4), 1.5e6);
  EXPECT_EQ(scatter_seconds(1e6, 1, link), 0.0);

  const std::vector<ParamInfo> mlp = builtin_model("mlp").params;
  const MethodPlan gathered = plan_method("int", mlp);
  const MethodPlan scattered = plan_method("int+--reducer=scatter", mlp);
  EXPECT_EQ(scattered.family, "scatter");
  EXPECT_EQ(scattered.outer.sync_every, 0);
  EXPECT_DOUBLE_EQ(scattered.message_bytes, gathered.message_bytes);
  // One collective: the messages and the uncompressed buckets' fp32 slices.
  ASSERT_EQ(scattered.rounds.size(), 1u);
  EXPECT_EQ(scattered.rounds[0].kind, Collective::kScatter);
  EXPECT_GT(scattered.rounds[0].bytes, scattered.message_bytes);
  EXPECT_TRUE(scattered.traits.all_allreduce);

  const MethodPlan outer = plan_method("int+--sync-every=45+--fragments=3+--reducer=scatter", mlp);
  EXPECT_EQ(outer.outer.sync_every, 45);
  ASSERT_EQ(outer.fragments.size(), 3u);
  for (const FragmentPlan& f : outer.fragments) {
    EXPECT_EQ(f.rounds.back().kind, Collective::kScatter);
  }
  EXPECT_EQ(plan_method("none+--reducer=scatter", mlp).family, "scatter");  // fp32 slices
  for (const char* bad : {"dgc+--reducer=scatter", "powersgd+--reducer=scatter",
                          "dense+--reducer=scatter", "int+--reducer=allgather"}) {
    EXPECT_THROW((void)plan_method(bad, mlp), InvalidArgument) << bad;
  }
}

TEST(AdviseSweep, AllgatherFallsBehindAllreduceAsWGrows) {
  SweepGrid g;
  g.workers = {2, 8, 64, 512};
  g.bandwidths = {125e6};
  const auto cells = run_sweep(plans(), scenario(125e6), speeds(), g);
  ASSERT_EQ(cells.size(), 4u);
  const auto ov = overtakes(cells);
  bool topk_by_powersgd = false;
  for (const Overtake& o : ov) {
    if (o.allgathered == "topk:ratio=0.01" && o.overtaken_by == "powersgd:rank=2") {
      topk_by_powersgd = true;
    }
  }
  // PowerSGD's bytes stay flat in W, top-k's grow: past some W it must win.
  EXPECT_TRUE(topk_by_powersgd || cells.front().ranked.front().spec == "powersgd:rank=2");
  const Prediction* at512 = nullptr;
  for (const Prediction& p : cells.back().ranked) {
    if (p.spec == "topk:ratio=0.01") at512 = &p;
  }
  ASSERT_NE(at512, nullptr);
  EXPECT_LT(at512->speedup, 1.0);  // 511 top-k messages of 1/50: more than dense's ring
  EXPECT_NE(sweep_svg(cells, "t", {125e6}, 8).find("<polyline"), std::string::npos);
}

TEST(AdviseInputs, BadInputsRefused) {
  EXPECT_THROW(builtin_model("vgg"), InvalidArgument);
  EXPECT_THROW(parse_sizes(""), InvalidArgument);
  EXPECT_THROW(parse_sizes("12y3"), InvalidArgument);
  EXPECT_THROW(parse_sizes("0"), InvalidArgument);
  EXPECT_THROW(parse_sizes("784x"), InvalidArgument);
  EXPECT_THROW(parse_sizes("-5"), InvalidArgument);
  const ModelSizes m = builtin_model("lenet5");
  EXPECT_THROW(plan_method("topk:ratio=2", m.params), InvalidArgument);
  EXPECT_THROW(plan_method("nosuch", m.params), InvalidArgument);
  EXPECT_THROW(plan_method("powersgd:rank=0", m.params), InvalidArgument);
  EXPECT_THROW(parse_bench_json(""), InvalidArgument);
  EXPECT_THROW(parse_bench_json("{\"kind\": \"codec\", \"spec\": \"qsgd\", \"n\": 10}"),
               InvalidArgument);
  const SpeedTable t = parse_bench_json(
      "{\"kind\": \"reference\", \"spec\": \"memcpy\", \"n\": 10, \"encode_ms\": 1}\n"
      "{\"kind\": \"codec\", \"spec\": \"qsgd\", \"memory\": \"qsgd:levels=16,bucket=512\", "
      "\"n\": 1000, \"encode_ms\": 2, \"decode_ms\": 0.5}\n");
  ASSERT_NE(t.find("qsgd:levels=16,bucket=512"), nullptr);
  EXPECT_DOUBLE_EQ(t.find("qsgd")->encode, 2e-6);
  Scenario s = scenario(1e6);
  s.workers = 0;
  EXPECT_THROW(predict(plans()[1], s, speeds()), InvalidArgument);
  // A codec without a speed is refused, not silently free.
  EXPECT_THROW(predict(plan_method("2bit", m.params), scenario(1e6), speeds()), InvalidArgument);
}

// The accuracy column is the project's table: every row of docs/measurements/accuracy.md
// (spec in backticks, points vs dense in the fourth column, U+2212 as the minus sign) is
// known to accuracy_cost() with the same value, and nothing else is.
TEST(AdviseAccuracy, MatchesTheAccuracyTable) {
  std::ifstream in(std::string(GRADCOMP_DOCS_DIR) + "/measurements/accuracy.md");
  ASSERT_TRUE(in) << "docs/measurements/accuracy.md";
  int rows = 0;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cols;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, '|');) cols.push_back(c);
    if (cols.size() < 5 || line.rfind("| ", 0) != 0) continue;
    const std::size_t a = cols[2].find('`'), b = cols[2].rfind('`');
    if (a == std::string::npos || b <= a) continue;
    const std::string spec = cols[2].substr(a + 1, b - a - 1);
    std::string pts = cols[4];
    const std::string minus = "\u2212";
    if (auto m = pts.find(minus); m != std::string::npos) pts.replace(m, minus.size(), "-");
    const double expected = pts.find_first_not_of(' ') == std::string::npos ? 0.0 : std::stod(pts);
    const auto got = accuracy_cost(spec);
    ASSERT_TRUE(got.has_value()) << spec << " is in accuracy.md but not in accuracy_cost()";
    EXPECT_DOUBLE_EQ(*got, expected) << spec;
    ++rows;
  }
  EXPECT_GE(rows, 10);
  EXPECT_FALSE(accuracy_cost("topk:ratio=0.5").has_value());
}

// Gradients on GPUs (Scenario::device): what crosses PCIe and where each codec runs.
TEST(AdviseDevice, PricesTheDevicePathTheStagingAndDenseApart) {
  const std::vector<ParamInfo> mlp = builtin_model("mlp").params;
  const MethodPlan topk = plan_method("topk:ratio=0.01", mlp);
  const MethodPlan powersgd = plan_method("powersgd:rank=2", mlp);
  const MethodPlan dgc = plan_method("dgc", mlp);
  const MethodPlan fp16 = plan_method("fp16", mlp);
  ASSERT_EQ(device_codec_spec(topk), builtin_registry().make_codec("topk:ratio=0.01")->spec());
  EXPECT_FALSE(device_codec_spec(powersgd));  // a scheme
  // DGC: top-k's selection at its density on the device reducer.
  ASSERT_EQ(device_codec_spec(dgc),
            builtin_registry().make_codec("topk:ratio=0.001,select=auto,sample=0.01")->spec());
  EXPECT_FALSE(device_codec_spec(fp16));  // a linear codec's allreduce

  SpeedTable host;
  for (const MethodPlan* m : {&topk, &dgc, &fp16}) host.set(m->spec, {1e-9, 1e-9, "test"});
  Scenario s;
  s.workers = 4;
  DeviceModel d;
  d.pcie_bandwidth = 10e9;
  d.bucket_overhead_s = 1e-3;
  d.speeds.set(*device_codec_spec(topk), {2e-10, 3e-10, "file"});
  s.device = d;

  const Prediction on = predict(topk, s, host);
  EXPECT_TRUE(on.on_device);
  const double elems = static_cast<double>(topk.compressed_elements);
  ASSERT_GT(topk.compressed_buckets, 0u);
  EXPECT_DOUBLE_EQ(on.encode_s,
                   2e-10 * elems + 1e-3 * static_cast<double>(topk.compressed_buckets));
  EXPECT_DOUBLE_EQ(on.decode_s, 3e-10 * elems * 4);
  const double dense_bytes = topk.gradient_bytes - 4.0 * elems;
  EXPECT_DOUBLE_EQ(on.pcie_s, (5.0 * topk.message_bytes + 2.0 * dense_bytes) / 10e9);
  EXPECT_DOUBLE_EQ(on.step_s, on.compute_s + on.encode_s + on.decode_s + on.pcie_s + on.exposed_s);

  // Without a device speed for its codec a method is staged: the gradient crosses both ways.
  for (const MethodPlan* staged : {&dgc, &fp16}) {
    const Prediction p = predict(*staged, s, host);
    EXPECT_FALSE(p.on_device) << staged->spec;
    EXPECT_DOUBLE_EQ(p.pcie_s, 2.0 * staged->gradient_bytes / 10e9) << staged->spec;
  }
  Scenario with_dgc = s;
  with_dgc.device->speeds.set(*device_codec_spec(dgc), {4e-10, 3e-10, "file"});
  const Prediction dgc_on = predict(dgc, with_dgc, host);
  EXPECT_TRUE(dgc_on.on_device);
  EXPECT_DOUBLE_EQ(dgc_on.encode_s, 4e-10 * static_cast<double>(dgc.compressed_elements) +
                                        1e-3 * static_cast<double>(dgc.compressed_buckets));
  const std::vector<Prediction> all = predict_all({topk}, s, host);
  const Prediction without = predict(topk, Scenario{}, host);
  EXPECT_EQ(without.pcie_s, 0.0);
  EXPECT_FALSE(without.on_device);
  // The scatter reducer on the device: an encode of every slice and of the owned mean, two
  // decodes an element, the messages across PCIe (3 + 1/W) times.
  const MethodPlan scatter = plan_method("topk:ratio=0.01+--reducer=scatter", mlp);
  ASSERT_EQ(scatter.family, "scatter");
  ASSERT_EQ(device_codec_spec(scatter), device_codec_spec(topk));
  host.set(scatter.spec, {1e-9, 1e-9, "test"});
  const Prediction scattered = predict(scatter, s, host);
  EXPECT_EQ(scattered.spec, "topk:ratio=0.01+--reducer=scatter");  // not the gathered row's name
  EXPECT_TRUE(scattered.on_device);
  EXPECT_DOUBLE_EQ(scattered.encode_s,
                   2e-10 * elems * 1.25 + 1e-3 * static_cast<double>(topk.compressed_buckets));
  EXPECT_DOUBLE_EQ(scattered.decode_s, 3e-10 * elems * 2);
  EXPECT_DOUBLE_EQ(scattered.pcie_s, (3.25 * scatter.message_bytes + 2.0 * dense_bytes) / 10e9);
  // The table says where each codec runs only when there is a device.
  EXPECT_NE(format_table(all, "x").find("codec on"), std::string::npos);
  EXPECT_EQ(format_table(predict_all({topk}, Scenario{}, host), "x").find("codec on"),
            std::string::npos);
}

// An outer loop with its parameters on GPUs: the rounds' copies of the weights, once each
// way per round (a delay fetches again at the merge), spread over the H steps.
TEST(AdviseDevice, PricesTheOuterLoopsStagingOfTheWeights) {
  const std::vector<ParamInfo> mlp = builtin_model("mlp").params;
  Scenario s;
  s.workers = 4;
  DeviceModel d;
  d.pcie_bandwidth = 10e9;
  s.device = d;
  SpeedTable host;
  for (const char* spec :
       {"fp16+--sync-every=30", "fp16+--sync-every=30+--fragments=3+--delay=2"}) {
    const MethodPlan plan = plan_method(spec, mlp);
    host.set(plan.spec, {1e-9, 1e-9, "test"});
    const Prediction p = predict(plan, s, host);
    const double copies = plan.outer.delay > 0 ? 3.0 : 2.0;
    EXPECT_DOUBLE_EQ(p.pcie_s, copies * plan.gradient_bytes / 10e9 / 30) << spec;
    EXPECT_FALSE(p.on_device) << spec;
    EXPECT_DOUBLE_EQ(p.step_s, p.compute_s + p.encode_s + p.decode_s + p.pcie_s + p.exposed_s);
    EXPECT_EQ(predict(plan, Scenario{}, host).pcie_s, 0.0) << spec;  // no GPU, no copies
  }
}

// The device reducer's PowerSGD: passes over the factored matrices at the device's memory
// bandwidth, a fixed cost per matrix, P, Q and the dense share across PCIe both ways.
TEST(AdviseDevice, PricesPowerSgdOnTheDevice) {
  const std::vector<ParamInfo> mlp = builtin_model("mlp").params;
  const MethodPlan powersgd = plan_method("powersgd:rank=2", mlp);
  ASSERT_GT(powersgd.compressed_buckets, 0u);  // the matrices it factors
  ASSERT_LT(powersgd.compressed_buckets, mlp.size());
  Scenario s;
  s.workers = 4;
  DeviceModel d;
  d.pcie_bandwidth = 10e9;
  d.memory_bandwidth = 1e12;
  d.matrix_overhead_s = 2e-4;
  s.device = d;
  const Prediction p = predict(powersgd, s, SpeedTable{});
  EXPECT_TRUE(p.on_device);
  double allreduced = 0.0;
  for (const Round& r : powersgd.rounds) allreduced += r.bytes;
  EXPECT_DOUBLE_EQ(p.pcie_s, 2.0 * allreduced / 10e9);
  EXPECT_DOUBLE_EQ(p.encode_s,
                   7.0 * 4.0 * static_cast<double>(powersgd.compressed_elements) / 1e12 +
                       2e-4 * static_cast<double>(powersgd.compressed_buckets));
  EXPECT_EQ(p.decode_s, 0.0);
  // Without a device it is the host's scheme, at the host's speed.
  EXPECT_FALSE(predict(powersgd, Scenario{}, SpeedTable{}).on_device);
}

}  // namespace
}  // namespace gradcomp::advise
