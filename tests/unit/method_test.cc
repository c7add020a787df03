// Method (gradcomp/method.h): a compressor spec parsed once for its run, its traits and
// what it refuses, without building a reducer.
#include "gradcomp/method.h"

#include <gtest/gtest.h>

#include <string>

#include "gradcomp/error.h"

namespace gradcomp {
namespace {

// The InvalidArgument message of parsing `spec` in `c`, or "" when it parses.
std::string refusal(const std::string& spec, const MethodContext& c = {}) {
  try {
    (void)Method::parse(spec, c);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(Method, ABareBiasedCodecGetsTheDefaultMemoryOfItsOptimizer) {
  EXPECT_EQ(Method::parse("topk", {.momentum = 0.9}).spec(), "efm(topk)");
  EXPECT_EQ(Method::parse("topk", {.momentum = 0.0}).spec(), "ef(topk)");
  // Unknown momentum (the Python hook before it sees its optimizer): as written.
  EXPECT_EQ(Method::parse("topk").spec(), "topk");
  // On ps-async the servers apply the momentum: plain error feedback on the workers.
  EXPECT_EQ(Method::parse("2bit", {.topology = Topology::kPsAsync, .momentum = 0.9}).spec(),
            "ef(2bit)");
  // Wrapped, unbiased, named memories and schemes are left as written.
  for (const char* spec : {"noef(topk)", "ef(topk)", "qsgd", "fp16", "dgc", "powersgd:rank=2"}) {
    EXPECT_EQ(Method::parse(spec, {.momentum = 0.9}).spec(), spec);
  }
}

TEST(Method, CanonicalSpellsOutEveryParameter) {
  EXPECT_EQ(Method::parse("powersgd").canonical(),
            "powersgd:rank=4,warmup_steps=0,error_feedback=1,warm_start=1");
  const Method topk = Method::parse("topk:ratio=0.25", {.momentum = 0.9});
  EXPECT_EQ(topk.canonical().rfind("efm(topk:ratio=0.25,", 0), 0u) << topk.canonical();
  // The canonical spec parses to the same method.
  EXPECT_EQ(Method::parse(topk.canonical(), {.momentum = 0.9}).canonical(), topk.canonical());
}

TEST(Method, AutoPicksTheReducerFromTheCodec) {
  const Method none = Method::parse("none");
  EXPECT_EQ(none.reducer(), ReducerKind::kDense);
  EXPECT_TRUE(none.dense_only());
  const Method fp16 = Method::parse("fp16");
  EXPECT_EQ(fp16.reducer(), ReducerKind::kAllreduce);
  EXPECT_TRUE(fp16.linear());
  EXPECT_FALSE(fp16.dense_fallback());
  const Method topk = Method::parse("topk");
  EXPECT_EQ(topk.reducer(), ReducerKind::kAllgather);
  EXPECT_TRUE(topk.dense_fallback());
  EXPECT_FALSE(topk.linear());
  // Named, allgather gathers whatever it costs.
  EXPECT_FALSE(Method::parse("topk", {.reducer = ReducerKind::kAllgather}).dense_fallback());
  EXPECT_TRUE(Method::parse("ef(none)", {.reducer = ReducerKind::kDense}).dense_only());
  // A scheme runs its own exchange.
  const Method psgd = Method::parse("powersgd");
  EXPECT_TRUE(psgd.is_scheme());
  EXPECT_EQ(psgd.codec(), nullptr);
  EXPECT_FALSE(psgd.dense_only());
  EXPECT_EQ(psgd.scheme_params().get_int("rank"), 4);
}

TEST(Method, RefusesAReducerThatCannotRunIt) {
  EXPECT_NE(refusal("topk", {.reducer = ReducerKind::kAllreduce}).find("needs a linear codec"),
            std::string::npos);
  // Dense would send topk's buckets whole while the run reported topk.
  for (const char* spec : {"topk", "efm(topk:ratio=0.01)", "fp16", "dgc"}) {
    EXPECT_NE(refusal(spec, {.reducer = ReducerKind::kDense})
                  .find("reducer: dense sends every bucket uncompressed; "),
              std::string::npos)
        << spec;
  }
  for (ReducerKind k : {ReducerKind::kDense, ReducerKind::kAllreduce, ReducerKind::kAllgather}) {
    EXPECT_NE(refusal("powersgd", {.reducer = k}).find("is a reducer of its own"),
              std::string::npos)
        << to_string(k);
  }
}

TEST(Method, KnowsWhoKeepsTheMomentum) {
  EXPECT_TRUE(Method::parse("topk", {.momentum = 0.9}).momentum_in_memory());   // efm
  EXPECT_FALSE(Method::parse("topk", {.momentum = 0.0}).momentum_in_memory());  // ef
  EXPECT_TRUE(Method::parse("dgc", {.momentum = 0.9}).momentum_in_memory());
  EXPECT_FALSE(Method::parse("dgc:correction=false", {.momentum = 0.9}).momentum_in_memory());
  EXPECT_TRUE(Method::parse("sketched-sgd", {.momentum = 0.9}).momentum_in_memory());
  EXPECT_TRUE(Method::parse("fetchsgd", {.momentum = 0.9}).momentum_in_memory());
  EXPECT_FALSE(Method::parse("powersgd", {.momentum = 0.9}).momentum_in_memory());
  // A dense reducer keeps no memory (and runs only none: dgc under it is refused).
  EXPECT_FALSE(Method::parse("efm(none)", {.reducer = ReducerKind::kDense, .momentum = 0.9})
                   .momentum_in_memory());
}

TEST(Method, AMemoryThatKeepsTheMomentumMustHaveTheOptimizers) {
  const std::string m = refusal("dgc:momentum=0.9", {.momentum = 0.5});
  EXPECT_NE(m.find("its momentum 0.9 differs from the optimizer's momentum 0.5"), std::string::npos)
      << m;
  EXPECT_NE(refusal("fetchsgd", {.momentum = 0.0}).find("differs"), std::string::npos);
  EXPECT_NE(refusal("dgc", {.momentum = 0.9, .nesterov = true}).find("nesterov=0"),
            std::string::npos);
  // Agreeing, to float precision (GradientExchange holds the momentum as a float).
  EXPECT_EQ(refusal("dgc:momentum=0.9", {.momentum = static_cast<double>(0.9f)}), "");
  EXPECT_EQ(refusal("sketched-sgd:momentum=0.5", {.momentum = 0.5}), "");
  // Without correction dgc leaves the momentum to the optimizer: nothing to agree on.
  EXPECT_EQ(refusal("dgc:correction=false", {.momentum = 0.5}), "");
  // Unknown momentum: checked later, by with_momentum.
  const Method later = Method::parse("dgc");
  EXPECT_THROW((void)later.with_momentum(0.5, false), InvalidArgument);
  EXPECT_EQ(later.with_momentum(0.9, false).spec(), "dgc");
  EXPECT_EQ(Method::parse("2bit").with_momentum(0.9, false).spec(), "efm(2bit)");
}

TEST(Method, RefusesWhatAParameterServerCannotRun) {
  const MethodContext ps_sync{.topology = Topology::kPsSync, .momentum = 0.9};
  const MethodContext ps_async{.topology = Topology::kPsAsync, .momentum = 0.9};
  EXPECT_NE(refusal("powersgd", ps_sync).find("runs with --topology allreduce"), std::string::npos);
  EXPECT_EQ(refusal("sketched-sgd", ps_sync), "");
  EXPECT_NE(refusal("sketched-sgd", ps_async).find("runs with --topology allreduce or ps-sync"),
            std::string::npos);
  EXPECT_NE(refusal("efm(topk)", ps_async).find("would be applied twice"), std::string::npos);
  EXPECT_EQ(refusal("topk", ps_async), "");  // ef(topk): the servers keep the momentum
  MethodContext compressed = ps_sync;
  compressed.downlink = Downlink::kCompressed;
  EXPECT_NE(refusal("sketched-sgd", compressed).find("use the dense downlink"), std::string::npos);
  EXPECT_EQ(refusal("2bit", compressed), "");
}

TEST(Method, BuildsTheMemoriesOfACodecMethod) {
  const Method m = Method::parse("topk:ratio=0.5", {.momentum = 0.9});
  const auto memory = m.make_memory(10);
  EXPECT_EQ(memory->size(), 10u);
  EXPECT_EQ(memory->spec(), m.canonical());
  EXPECT_EQ(memory->codec().spec(), m.codec()->spec());
  EXPECT_THROW((void)Method::parse("powersgd").make_memory(10), InvalidArgument);
}

TEST(Method, BadSpecsAreRefusedInOneLine) {
  for (const char* bad : {"", "nosuch", "topk:ratio=2", "ef(powersgd)", "powersgd:rank=0",
                          "dgc(topk)", "sketched-sgd:bogus=1", "topk:ratio=0.1,ratio=0.2"}) {
    const std::string m = refusal(bad);
    EXPECT_FALSE(m.empty()) << bad;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(Method, NamesAndKindsRoundTrip) {
  for (ReducerKind k : {ReducerKind::kAuto, ReducerKind::kDense, ReducerKind::kAllreduce,
                        ReducerKind::kAllgather}) {
    EXPECT_EQ(parse_reducer_kind(to_string(k)), k);
  }
  for (Topology t : {Topology::kAllreduce, Topology::kPsSync, Topology::kPsAsync}) {
    EXPECT_EQ(parse_topology(to_string(t)), t);
  }
  EXPECT_THROW((void)parse_reducer_kind("fast"), InvalidArgument);
  EXPECT_EQ(default_compressor(ReducerKind::kAuto), "powersgd");
  for (ReducerKind k : {ReducerKind::kAuto, ReducerKind::kDense, ReducerKind::kAllreduce,
                        ReducerKind::kAllgather}) {
    EXPECT_EQ(refusal(default_compressor(k), {.reducer = k, .momentum = 0.9}), "") << to_string(k);
  }
}

}  // namespace
}  // namespace gradcomp
