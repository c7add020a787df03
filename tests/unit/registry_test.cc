// Spec strings: grammar, validation, canonical forms, memory wrappers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gradcomp/error.h"
#include "gradcomp/registry.h"
#include "gradcomp/wire.h"

namespace gradcomp {
namespace {

// A throwaway registry with one codec whose parameters exercise every kind.
CodecRegistry toy_registry() {
  class Toy final : public Codec {
   public:
    Toy(CodecIdentity id, bool biased) : Codec(std::move(id), {.needs_memory = biased}) {}

   protected:
    std::size_t max_payload_bytes(std::size_t) const override { return 0; }
    std::size_t encode_payload(std::span<const float>, const StepContext&, std::span<std::byte>,
                               PayloadCrc*) const override {
      return 0;
    }
    void decode_payload_add(std::span<const std::byte>, std::span<float>, float) const override {}
  };
  CodecRegistry r;
  r.add({.name = "toy",
         .wire_id = 900,
         .summary = "test",
         .traits = {},
         .params = {float_param("ratio", 0.01, 0.0, 1.0, "fraction", /*min_exclusive=*/true),
                    int_param("levels", 16, 1, 1 << 20, "levels"),
                    choice_param("mode", "exact", {"exact", "sampled"}, "selection"),
                    bool_param("biased", true, "needs memory")},
         .examples = {},
         .make = [](CodecIdentity id, const Params& p) -> std::unique_ptr<Codec> {
           return std::make_unique<Toy>(std::move(id), p.get_bool("biased"));
         }});
  return r;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(SpecParser, ParsesNamesParamsAndWrappers) {
  const SpecNode n = parse_spec("ef(qsgd:levels=16,bucket=512)");
  EXPECT_EQ(n.name, "ef");
  ASSERT_TRUE(n.inner);
  EXPECT_EQ(n.inner->name, "qsgd");
  ASSERT_EQ(n.inner->params.size(), 2u);
  EXPECT_EQ(n.inner->params[1].first, "bucket");
  EXPECT_EQ(n.inner->params[1].second, "512");
}

TEST(SpecParser, RejectsMalformedSpecs) {
  for (const char* bad :
       {"", ":", "topk:", "topk:ratio", "topk:ratio=", "topk:=1", "topk:ratio=1,", "ef(", "ef(topk",
        "ef(topk))", "Topk", "topk ratio=1", " topk", "topk:ratio=1:levels=2",
        "topk:ratio=1,ratio=2", "ef()", "a(b(c(d(e(f(g(h(i(j))))))))))"}) {
    EXPECT_THROW(parse_spec(bad), InvalidArgument) << "'" << bad << "'";
  }
}

// A spec is printable ASCII; anything else is named as \xNN, in a message that stays one
// line of valid text (a NUL cut the message short, half a UTF-8 character broke Python's
// decoding of it).
TEST(SpecParser, BytesOutsidePrintableAsciiAreNamedEscaped) {
  using namespace std::string_literals;
  EXPECT_EQ(error_of([] { parse_spec("t\xC3\xB3pk"); }),
            "spec 't\\xC3\\xB3pk': byte \\xC3 is not printable ASCII at position 1");
  EXPECT_EQ(error_of([] { parse_spec("top\0k"s); }),
            "spec 'top\\x00k': byte \\x00 is not printable ASCII at position 3");
  EXPECT_EQ(error_of([] { parse_spec("topk:ratio=0.1\n"); }),
            "spec 'topk:ratio=0.1\\x0A': byte \\x0A is not printable ASCII at position 14");
}

TEST(Registry, FillsDefaultsAndCanonicalises) {
  auto r = toy_registry();
  auto c = r.make_codec("toy:mode=sampled,ratio=0.5");
  EXPECT_EQ(c->spec(), "toy:ratio=0.5,levels=16,mode=sampled,biased=1");
  EXPECT_EQ(r.make_codec(c->spec())->config_tag(), c->config_tag());
  EXPECT_NE(r.make_codec("toy:ratio=0.25")->config_tag(), c->config_tag());
}

TEST(Registry, ErrorsNameTheProblemAndTheChoices) {
  auto r = toy_registry();
  EXPECT_NE(error_of([&] { r.make_codec("toyy"); }).find("known: toy"), std::string::npos);
  EXPECT_NE(
      error_of([&] { r.make_codec("toy:ratioo=1"); }).find("known: ratio, levels, mode, biased"),
      std::string::npos);
  EXPECT_NE(error_of([&] { r.make_codec("toy:ratio=0"); }).find("out of range (0, 1]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { r.make_codec("toy:ratio=1.5"); }).find("out of range"),
            std::string::npos);
  EXPECT_NE(error_of([&] { r.make_codec("toy:ratio=0.1x"); }).find("not a finite number"),
            std::string::npos);
  EXPECT_NE(error_of([&] { r.make_codec("toy:ratio=nan"); }).find("not a finite number"),
            std::string::npos);
  EXPECT_NE(error_of([&] { r.make_codec("toy:levels=2.5"); }).find("not an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { r.make_codec("toy:levels=0"); }).find("out of range [1, 1048576]"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { r.make_codec("toy:levels=99999999999999999999"); }).find("not an integer"),
      std::string::npos);
  EXPECT_NE(
      error_of([&] { r.make_codec("toy:mode=fast"); }).find("expected one of: exact, sampled"),
      std::string::npos);
  EXPECT_NE(error_of([&] { r.make_codec("toy:biased=yes"); }).find("expected 0, 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { r.make_codec("ef(toy)"); }).find("plain codec spec"), std::string::npos);
  EXPECT_NE(error_of([&] { r.make_memory("ef", 4); }).find("takes a codec"), std::string::npos);
  EXPECT_NE(error_of([&] { r.make_memory("ef(ef(toy))", 4); }).find("plain codec spec"),
            std::string::npos);
}

TEST(Registry, BiasedCodecsGetErrorFeedbackByDefault) {
  auto r = toy_registry();
  EXPECT_EQ(r.make_memory("toy", 8)->state().size(), 1u);           // biased: ef
  EXPECT_EQ(r.make_memory("toy:biased=0", 8)->state().size(), 0u);  // unbiased: none
  EXPECT_EQ(r.make_memory("noef(toy)", 8)->state().size(), 0u);     // ablation
  EXPECT_EQ(r.make_memory("ef(toy:biased=0)", 8)->state().size(), 1u);
  EXPECT_EQ(r.make_memory("ef(toy)", 8)->spec(),
            "ef(toy:ratio=0.01,levels=16,mode=exact,biased=1)");
}

TEST(Registry, DefaultMemoryIsMomentumCorrectedUnderMomentum) {
  auto r = toy_registry();
  EXPECT_EQ(r.with_default_memory("toy", 0.9), "efm(toy)");
  EXPECT_EQ(r.with_default_memory("toy:ratio=0.5", 0.0), "ef(toy:ratio=0.5)");
  EXPECT_TRUE(r.make_memory(r.with_default_memory("toy", 0.9), 8)->carries_momentum());
  EXPECT_FALSE(r.make_memory(r.with_default_memory("toy", 0.0), 8)->carries_momentum());
  // Unbiased codecs, wrapped specs and names that are not codecs stay as written.
  EXPECT_EQ(r.with_default_memory("toy:biased=0", 0.9), "toy:biased=0");
  EXPECT_EQ(r.with_default_memory("ef(toy)", 0.9), "ef(toy)");
  EXPECT_EQ(r.with_default_memory("noef(toy)", 0.9), "noef(toy)");
  EXPECT_EQ(r.with_default_memory("powersgd:rank=2", 0.9), "powersgd:rank=2");
  // Resolving twice changes nothing.
  EXPECT_EQ(r.with_default_memory(r.with_default_memory("toy", 0.9), 0.0), "efm(toy)");
  // A bad spec fails as make_memory does.
  EXPECT_NE(error_of([&] { (void)r.with_default_memory("toy:ratio=7", 0.9); }).find("ratio"),
            std::string::npos);
}

TEST(Registry, MakeCodecOfStripsMemoryWrappers) {
  auto r = toy_registry();
  const auto plain = r.make_codec("toy:ratio=0.5");
  for (const char* spec : {"toy:ratio=0.5", "ef(toy:ratio=0.5)", "noef(toy:ratio=0.5)"}) {
    const auto c = r.make_codec_of(spec);
    EXPECT_EQ(c->spec(), plain->spec()) << spec;
    EXPECT_EQ(c->config_tag(), plain->config_tag()) << spec;
  }
  // The codec that decodes what the memory sends.
  EXPECT_EQ(r.make_codec_of("ef(toy)")->spec(), r.make_memory("ef(toy)", 4)->codec().spec());
  EXPECT_NE(error_of([&] { r.make_codec_of("ef"); }).find("takes a codec"), std::string::npos);
  EXPECT_NE(error_of([&] { r.make_codec_of("ef(noef(toy))"); }).find("plain codec spec"),
            std::string::npos);
  EXPECT_NE(error_of([&] { r.make_codec_of("ef(toyy)"); }).find("known: toy"), std::string::npos);
  EXPECT_NE(error_of([&] { r.make_codec_of("toy:ratio=2"); }).find("out of range"),
            std::string::npos);
}

TEST(Registry, RejectsDuplicateNamesAndWireIds) {
  auto r = toy_registry();
  CodecInfo dup = *r.find("toy");
  EXPECT_THROW(r.add(dup), InvalidArgument);
  dup.name = "toy2";
  EXPECT_THROW(r.add(dup), InvalidArgument);  // same wire id
}

TEST(Registry, BuiltinCodecsHaveUniqueIdsAndDocumentedParams) {
  const auto all = builtin_registry().all();
  ASSERT_FALSE(all.empty());
  for (const CodecInfo* info : all) {
    EXPECT_FALSE(info->summary.empty()) << info->name;
    for (const auto& p : info->params) EXPECT_FALSE(p.help.empty()) << info->name << ":" << p.key;
    // Defaults and examples must build.
    EXPECT_NO_THROW(builtin_registry().make_codec(info->name)) << info->name;
    for (const auto& e : info->examples) EXPECT_NO_THROW(builtin_registry().make_codec(e)) << e;
  }
}

}  // namespace
}  // namespace gradcomp

namespace gradcomp {
namespace {

// include/gradcomp/wire.h's WireId is the one list of the built-in codecs' ids: every
// registered codec uses one of its entries, and every entry belongs to one codec.
TEST(WireIds, EveryBuiltinCodecHasOneEntryOfTheList) {
  std::vector<std::uint16_t> registered;
  for (const CodecInfo* info : builtin_registry().all()) registered.push_back(info->wire_id);
  std::sort(registered.begin(), registered.end());
  std::vector<std::uint16_t> listed;
  for (const WireId id : kBuiltinWireIds) listed.push_back(wire_id(id));
  EXPECT_EQ(registered, listed);
}

}  // namespace
}  // namespace gradcomp
