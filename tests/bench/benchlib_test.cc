// gradcomp_benchlib: the allocation counter, raw float32 / message files (errors and
// atomic writes), the codec file operations behind `gradcomp codec`, the harness and
// its outputs, and `gradcomp list`'s catalog.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "bench/alloc_counter.h"
#include "bench/catalog.h"
#include "bench/codec_files.h"
#include "bench/harness.h"
#include "bench/raw_io.h"
#include "detail/scratch.h"
#include "gradcomp/error.h"
#include "gradcomp/json.h"
#include "gradcomp/registry.h"
#include "gradcomp/wire.h"

namespace gradcomp::bench {
namespace {

namespace fs = std::filesystem;

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "gradcomp-benchlib.XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write_raw(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
  }
  std::string read_raw(const std::string& name) const {
    std::ifstream f(path(name), std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
  }
  fs::path dir_;
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// ---- allocation counter ---------------------------------------------------------

// Through a volatile pointer: the compiler may elide a new/delete pair it can see.
void* volatile g_sink = nullptr;

TEST(AllocCounter, CountsEveryOperatorNewOverload) {
  const std::uint64_t before = allocation_count();
  g_sink = new int(1);
  delete static_cast<int*>(g_sink);
  g_sink = new int[3];
  delete[] static_cast<int*>(g_sink);
  g_sink = new (std::nothrow) int(2);
  delete static_cast<int*>(g_sink);
  g_sink = ::operator new (100, std::align_val_t{64});
  ::operator delete (g_sink, std::align_val_t{64});
  g_sink = ::operator new[](100, std::align_val_t{128});
  ::operator delete[](g_sink, std::align_val_t{128});
  g_sink = ::operator new (8, std::align_val_t{256}, std::nothrow);
  ::operator delete (g_sink, std::align_val_t{256});
  EXPECT_EQ(allocation_count() - before, 6u);
}

TEST(AllocCounter, AlignedAllocationsAreAligned) {
  for (std::size_t align : {16u, 64u, 4096u}) {
    g_sink = ::operator new (3, std::align_val_t{align});
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(g_sink) % align, 0u) << align;
    ::operator delete (g_sink, std::align_val_t{align});
  }
}

TEST(AllocCounter, SeesScratchGrowthButNotReuse) {
  // A slot on a fresh thread: the first use grows it, the second reuses it.
  std::uint64_t grow = 0, reuse = 0;
  std::thread([&] {
    std::uint64_t a = allocation_count();
    detail::scratch<float>(0, 1000);
    grow = allocation_count() - a;
    a = allocation_count();
    detail::scratch<float>(0, 1000);
    reuse = allocation_count() - a;
  }).join();
  EXPECT_GE(grow, 1u);
  EXPECT_EQ(reuse, 0u);
}

// ---- raw files ------------------------------------------------------------------

using RawIo = TempDir;

TEST_F(RawIo, FloatsRoundTripBitForBit) {
  const std::vector<float> v = {1.0f, -0.0f, 3.5e-41f, -1e30f, std::nanf("")};
  write_floats_atomic(path("a.f32"), v);
  EXPECT_EQ(fs::file_size(path("a.f32")), 4 * v.size());
  const auto back = read_floats(path("a.f32"));
  ASSERT_EQ(back.size(), v.size());
  EXPECT_EQ(0, std::memcmp(back.data(), v.data(), 4 * v.size()));
  EXPECT_FALSE(fs::exists(path("a.f32.tmp")));
}

TEST_F(RawIo, ErrorsNameTheFileAndTheProblem) {
  EXPECT_NE(error_of([&] { read_floats(path("missing.f32")); }).find("missing.f32': cannot open"),
            std::string::npos);
  write_raw("ten.f32", "0123456789");
  EXPECT_NE(error_of([&] { read_floats(path("ten.f32")); }).find("10 bytes"), std::string::npos);
  EXPECT_NE(error_of([&] { read_bytes(dir_.string()); }).find("directory"), std::string::npos);
  EXPECT_NE(error_of([&] { read_floats(""); }).find("empty file name"), std::string::npos);
  // One line each.
  EXPECT_EQ(error_of([&] { read_floats(path("ten.f32")); }).find('\n'), std::string::npos);
}

TEST_F(RawIo, FailedWriteKeepsTheOldFile) {
  write_raw("keep.bin", "old contents");
  // The temporary cannot be created: a directory is in its way.
  fs::create_directory(path("keep.bin.tmp"));
  const std::vector<std::byte> data(16, std::byte{1});
  EXPECT_NE(error_of([&] { write_bytes_atomic(path("keep.bin"), data); }).find("cannot create"),
            std::string::npos);
  EXPECT_EQ(read_raw("keep.bin"), "old contents");
  fs::remove(path("keep.bin.tmp"));
  // The destination is a non-empty directory: rename fails, the temporary is removed.
  fs::create_directory(path("dir.bin"));
  write_raw("dir.bin/x", "x");
  EXPECT_THROW(write_bytes_atomic(path("dir.bin"), data), InvalidArgument);
  EXPECT_FALSE(fs::exists(path("dir.bin.tmp")));
  EXPECT_TRUE(fs::is_directory(path("dir.bin")));
}

// ---- codec files ------------------------------------------------------------------

using CodecFiles = TempDir;

TEST_F(CodecFiles, EncodeDecodeRoundTripWithResidual) {
  const std::vector<float> g = {1, 2, -3, 0.5f};
  write_floats_atomic(path("g.f32"), g);
  const std::vector<float> r = {0.25f, 0, 0, -1};
  write_floats_atomic(path("r.f32"), r);
  EncodeFileRequest req{.spec = "ef(none)",
                        .in = path("g.f32"),
                        .out = path("m.bin"),
                        .residual = path("r.f32"),
                        .ctx = {}};
  const auto enc = encode_file(builtin_registry(), req);
  EXPECT_EQ(enc.n, 4u);
  EXPECT_TRUE(enc.residual_loaded);
  EXPECT_EQ(enc.memory_spec, "ef(none)");
  EXPECT_EQ(read_floats(path("r.f32")), std::vector<float>(4, 0.0f));  // none is exact
  const auto dec = decode_file(builtin_registry(), "ef(none)", path("m.bin"), path("d.f32"));
  EXPECT_EQ(dec.n, 4u);
  EXPECT_EQ(read_floats(path("d.f32")), (std::vector<float>{1.25f, 2, -3, -0.5f}));
}

TEST_F(CodecFiles, RejectsBadResidualsAndMessagesWithoutWriting) {
  write_floats_atomic(path("g.f32"), std::vector<float>{1, 2, 3});
  write_floats_atomic(path("r.f32"), std::vector<float>{1, 2});
  write_raw("out.bin", "keep");
  EncodeFileRequest req{.spec = "ef(none)",
                        .in = path("g.f32"),
                        .out = path("out.bin"),
                        .residual = path("r.f32"),
                        .ctx = {}};
  const std::string e = error_of([&] { encode_file(builtin_registry(), req); });
  EXPECT_NE(e.find("r.f32'"), std::string::npos) << e;
  EXPECT_NE(e.find("2 floats"), std::string::npos) << e;
  EXPECT_NE(e.find("keeps 3"), std::string::npos) << e;
  req.spec = "none";
  EXPECT_NE(error_of([&] { encode_file(builtin_registry(), req); }).find("keeps no memory"),
            std::string::npos);
  EXPECT_EQ(read_raw("out.bin"), "keep");

  // A header that claims 2^32-1 elements: rejected before n floats are allocated.
  std::vector<std::byte> msg(kHeaderBytes + 8);
  const auto none = builtin_registry().make_codec("none");
  write_header(msg, none->wire_id(), none->config_tag(), 0xFFFFFFFFu, 8);
  write_bytes_atomic(path("huge.bin"), msg);
  write_raw("d.f32", "keep");
  EXPECT_THROW(decode_file(builtin_registry(), "none", path("huge.bin"), path("d.f32")),
               CorruptMessage);
  EXPECT_EQ(read_raw("d.f32"), "keep");
}

// ---- harness ------------------------------------------------------------------------

TEST(Harness, InputIsDeterministicGaussianish) {
  const auto a = bench_input(100000, 7);
  EXPECT_EQ(a, bench_input(100000, 7));
  EXPECT_NE(a, bench_input(100000, 8));
  double sum = 0, sq = 0;
  for (float v : a) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  const auto count = static_cast<double>(a.size());
  EXPECT_NEAR(sum / count, 0.0, 0.05);
  EXPECT_GT(sq / count, 0.3);  // variance 1/3, plus the scaled tail
}

TEST(Harness, DefaultSpecsCoverEveryCodecAndTopkComparisons) {
  const auto specs = default_bench_specs(builtin_registry());
  for (const CodecInfo* info : builtin_registry().all()) {
    EXPECT_NE(std::find(specs.begin(), specs.end(), info->name), specs.end()) << info->name;
  }
  EXPECT_NE(std::find(specs.begin(), specs.end(), "topk:ratio=0.001,select=sampled"), specs.end());
  EXPECT_NE(std::find(specs.begin(), specs.end(), "topk:ratio=0.001,select=exact"), specs.end());
}

TEST(Harness, RowsComparisonsAndOutputs) {
  BenchOptions options;
  options.size = 4096;
  options.repeats = 3;
  options.specs = {"none", "ef(none)"};
  Baseline fake;
  fake.name = "fake";
  fake.compare_with = {"none", "nosuchcodec:x=1"};
  fake.run = [](std::span<const float> in, const BenchOptions&) {
    BenchRow row;
    row.n = in.size();
    row.encode_ms = 1.0;
    return row;
  };
  const BenchReport report = run_codec_bench(builtin_registry(), options, {fake});
  ASSERT_EQ(report.rows.size(), 4u);
  EXPECT_EQ(report.rows[0].name, "memcpy");
  EXPECT_EQ(report.rows[1].name, "none");
  EXPECT_EQ(report.rows[2].memory, "ef(none)");
  EXPECT_EQ(report.rows[3].kind, "baseline");
  const BenchRow& none = report.rows[1];
  EXPECT_EQ(none.message_bytes, kHeaderBytes + 4 * 4096);
  EXPECT_NEAR(none.ratio, 4.0 * 4096 / (kHeaderBytes + 4 * 4096), 1e-12);
  EXPECT_GT(none.encode_gbps, 0);
  EXPECT_GT(none.decode_gbps, 0);
  EXPECT_EQ(none.encode_allocs_per_call, 0.0);  // steady state
  EXPECT_EQ(none.decode_allocs_per_call, 0.0);
  EXPECT_EQ(report.rows[2].encode_allocs_per_call, 0.0);
  ASSERT_EQ(report.comparisons.size(), 1u);
  EXPECT_DOUBLE_EQ(report.comparisons[0].codec_encode_speedup, 1.0 / none.codec_encode_ms);
  ASSERT_EQ(report.notes.size(), 1u);
  EXPECT_NE(report.notes[0].find("nosuchcodec"), std::string::npos);

  const std::string table = format_table(report);
  EXPECT_NE(table.find("\nmemcpy "), std::string::npos);
  EXPECT_NE(table.find("none: "), std::string::npos);  // the comparison line
  const std::string json = format_json_lines(report);
  std::size_t lines = 0;
  for (std::size_t at = 0; at < json.size(); ++lines) {
    const std::size_t end = json.find('\n', at);
    ASSERT_NE(end, std::string::npos);
    EXPECT_EQ(json[at], '{');
    EXPECT_EQ(json[end - 1], '}');
    at = end + 1;
  }
  EXPECT_EQ(lines, 4u + 1u + 1u);                                 // rows, comparison, note
  EXPECT_NE(json.find("\"decode_ms\":null"), std::string::npos);  // memcpy has no decode
}

TEST(Harness, UserSpecsMustBuildDefaultsMaySkip) {
  BenchOptions options;
  options.size = 64;
  options.repeats = 1;
  options.specs = {"none", "nosuchcodec"};
  EXPECT_THROW(run_codec_bench(builtin_registry(), options), InvalidArgument);
  options.specs.clear();
  const auto report = run_codec_bench(builtin_registry(), options);
  EXPECT_EQ(report.rows.size(),
            1 + builtin_registry().all().size() + (builtin_registry().find("topk") ? 2u : 0u));
  options.size = 0;
  EXPECT_THROW(run_codec_bench(builtin_registry(), options), InvalidArgument);
}

// ---- json and catalog -------------------------------------------------------------

TEST(Json, QuotesAndNumbers) {
  EXPECT_EQ(json_quote("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\u0001\"");
  EXPECT_EQ(json_number(1048576), "1048576");
  EXPECT_EQ(json_number(0.001), "0.001");
  EXPECT_EQ(json_number(std::nan("")), "null");
  EXPECT_EQ(JsonObject().add("a", 1).add("b", "x").add("c", true).str(),
            "{\"a\":1,\"b\":\"x\",\"c\":true}");
}

TEST(Catalog, ListsEveryCodecAndTheWrappers) {
  const std::string text = describe_codecs_text(builtin_registry());
  const std::string json = describe_codecs_json(builtin_registry());
  for (const CodecInfo* info : builtin_registry().all()) {
    EXPECT_NE(text.find("\n" + info->name + "  (wire id " + std::to_string(info->wire_id)),
              std::string::npos)
        << info->name;
    EXPECT_NE(json.find("\"name\":\"" + info->name + "\""), std::string::npos) << info->name;
    for (const auto& p : info->params) {
      EXPECT_NE(text.find(p.help), std::string::npos) << info->name << ":" << p.key;
    }
    for (const auto& e : info->examples) EXPECT_NE(text.find(e), std::string::npos) << e;
  }
  EXPECT_NE(text.find("ef(SPEC)"), std::string::npos);
  EXPECT_NE(text.find("noef(SPEC)"), std::string::npos);
  EXPECT_NE(text.find("unless wrapped in noef(...)"), std::string::npos);
}

TEST(Catalog, ShowsEveryKindOfParameter) {
  // A registry with one parameterised codec (the built-in ones may have none yet).
  class Toy final : public Codec {
   public:
    explicit Toy(CodecIdentity id) : Codec(std::move(id), {.needs_memory = true}) {}

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
         .summary = "a toy codec",
         .traits = {.needs_memory = true, .stochastic = true},
         .params = {float_param("ratio", 0.01, 0.0, 1.0, "fraction sent", true),
                    int_param("levels", 16, 1, 1 << 20, "quantisation levels"),
                    choice_param("select", "sampled", {"exact", "sampled"}, "selection"),
                    bool_param("fp16", false, "half-precision values")},
         .examples = {"toy:ratio=0.5,select=exact"},
         .make = [](CodecIdentity id, const Params&) -> std::unique_ptr<Codec> {
           return std::make_unique<Toy>(std::move(id));
         }});
  const std::string text = describe_codecs_text(r);
  for (const char* want :
       {"toy  (wire id 900)  gathered, biased, error feedback by default, stochastic",
        "a toy codec", "default: toy:ratio=0.01,levels=16,select=sampled,fp16=0", "(0, 1]",
        "[1, 1048576]", "one of: exact, sampled", "0 or 1", "default 0.01", "fraction sent",
        "examples: toy:ratio=0.5,select=exact"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
  const std::string json = describe_codecs_json(r);
  for (const char* want :
       {"\"key\":\"ratio\",\"type\":\"float\",\"default\":\"0.01\",\"min\":0,\"max\":1,"
        "\"min_exclusive\":true",
        "\"max\":1048576", "\"choices\":[\"exact\",\"sampled\"]", "\"memory\":true",
        "\"examples\":[\"toy:ratio=0.5,select=exact\"]"}) {
    EXPECT_NE(json.find(want), std::string::npos) << want << "\n" << json;
  }
}

TEST(Catalog, ListsNamedMemoriesWithTheirMessageCodec) {
  const std::string text = describe_codecs_text(builtin_registry());
  for (const char* want : {"Memories (", "\ndgc\n", "default: dgc:density=0.001,momentum=0.9,",
                           "messages: topk:ratio=0.25,select=sampled,values=fp32,sample=0.01",
                           "warmup_epochs", "examples: dgc:density=0.01"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
  const std::string json = describe_codecs_json(builtin_registry());
  for (const char* want : {"{\"kind\":\"memory\",\"name\":\"dgc\"",
                           "\"message_codec\":\"topk:ratio=0.25,select=sampled",
                           "\"key\":\"masking\",\"type\":\"bool\""}) {
    EXPECT_NE(json.find(want), std::string::npos) << want << "\n" << json;
  }
}

}  // namespace
}  // namespace gradcomp::bench
