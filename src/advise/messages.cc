// Per-method wire plans; see messages.h.
#include "gradcomp/advise/messages.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <system_error>
#include <utility>

#include "gradcomp/error.h"
#include "gradcomp/memory.h"
#include "gradcomp/method.h"
#include "gradcomp/wire.h"

namespace gradcomp::advise {

namespace {

constexpr double kF32 = 4.0;

// A gradient-like vector: a pure function of n (splitmix64 -> centred sum of uniforms,
// one in 64 scaled by 8 for a heavy tail, as the codec bench's input).
std::vector<float> synthetic(std::size_t n) {
  std::vector<float> v(n);
  std::uint64_t s = 0x9E3779B97F4A7C15ull ^ n;
  auto next = [&s] {
    s += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t r = next();
    float x = static_cast<float>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) +
                                 ((r >> 48) & 0xFFFF)) /
                  65536.0f -
              2.0f;
    if ((r & 63) == 0) x *= 8.0f;
    v[i] = x * 0.01f;
  }
  return v;
}

// "fc2.weight + dense(6 tensors)": a group's buckets, by name.
std::string describe(std::span<const BucketPlan> members) {
  std::string out;
  for (const BucketPlan& b : members) out += (out.empty() ? "" : " + ") + b.name;
  return out;
}

std::size_t total_numel(std::span<const BucketPlan> buckets) {
  std::size_t total = 0;
  for (const BucketPlan& b : buckets) total += b.numel;
  return total;
}

// The dense baseline: the none codec, bare (by wire id, the registry's own name for a
// codec), or "dense", the advisor's alias for it.
bool is_dense(std::string_view spec, const SpecNode& node, const CodecRegistry& registry) {
  if (spec == "dense") return true;
  if (node.inner || !node.params.empty()) return false;
  const CodecInfo* info = registry.find(node.name);
  return info != nullptr && info->wire_id == static_cast<std::uint16_t>(WireId::kNone);
}

// Bytes of a linear region's element type.
double dtype_bytes(WireDType d) { return d == WireDType::kFloat32 ? 4.0 : 2.0; }

MethodPlan plan_dense(std::string_view spec, std::span<const BucketPlan> buckets) {
  const std::size_t total = total_numel(buckets);
  MethodPlan m;
  m.spec = std::string(spec);
  m.canonical = "none";
  m.family = "dense";
  m.traits = kDenseTraits;
  m.gradient_bytes = kF32 * static_cast<double>(total);
  m.rounds.push_back({"fp32 gradient", Collective::kAllreduce, kF32 * static_cast<double>(total)});
  m.ps_rounds.push_back({"fp32 push, fp32 mean", kF32 * static_cast<double>(total),
                         kF32 * static_cast<double>(total)});
  return m;
}

// A scheme's plan from its registry entry's traffic hook, whichever scheme it is.
MethodPlan plan_scheme(std::string_view spec, const SchemeDescription& info, const SpecNode& node,
                       std::span<const BucketPlan> buckets) {
  MethodPlan m;
  m.spec = std::string(spec);
  m.canonical = canonical_scheme_spec(info, node);
  m.family = info.name;
  m.gradient_bytes = kF32 * static_cast<double>(total_numel(buckets));
  if (!info.traffic) throw InvalidArgument(info.name + ": the cost model has no traffic for it");
  SchemeTraffic t = info.traffic(resolve_params(info.name, info.params, node), buckets);
  m.traits.scheme = true;
  m.traits.all_allreduce = std::all_of(t.rounds.begin(), t.rounds.end(), [](const Round& r) {
    return r.kind == Collective::kAllreduce;
  });
  m.rounds = std::move(t.rounds);
  m.ps_rounds = std::move(t.server_rounds);
  m.ps_note = std::move(t.server_note);
  m.compressed_elements = t.compressed_elements;
  m.compressed_buckets = t.compressed_buckets;
  m.speed_spec = std::move(t.speed_spec);
  m.fallback = std::move(t.fallback);
  return m;
}

// scatter: the scatter reducer (--reducer=scatter) instead of the codec's own aggregation.
MethodPlan plan_codec(std::string_view spec, const CodecRegistry& registry,
                      std::span<const BucketPlan> buckets, bool scatter) {
  const std::size_t total = total_numel(buckets);
  MethodPlan m;
  m.spec = std::string(spec);
  m.gradient_bytes = kF32 * static_cast<double>(total);
  const std::shared_ptr<const Codec> codec = registry.make_codec_of(spec);
  m.canonical = registry.make_memory(spec, 0)->spec();
  const bool linear = codec->traits().linear;
  m.family = linear ? "allreduce" : "allgather";
  m.traits = {.all_allreduce = linear, .overlappable = linear, .decode_per_peer = !linear};
  double dense = 0.0, f32 = 0.0, f16 = 0.0, messages = 0.0;
  for (const BucketPlan& b : buckets) {
    if (!b.compressible) {
      dense += static_cast<double>(b.numel);
      continue;
    }
    m.compressed_elements += b.numel;
    ++m.compressed_buckets;
    const double bytes = static_cast<double>(encoded_bytes(registry, spec, b.numel));
    messages += bytes;
    if (linear) {
      const LinearRegion r = codec->linear_region(b.numel);
      (r.dtype == WireDType::kFloat16 ? f16 : f32) +=
          dtype_bytes(r.dtype) * static_cast<double>(r.count);
    }
  }
  m.message_bytes = messages;
  if (scatter) {
    // Each worker encodes its whole message (1/W to each owner) and decodes every owner's
    // mean, plus the owner's W slices of 1/W: the per-element costs count one of each.
    m.family = "scatter";
    m.traits = {.all_allreduce = true, .overlappable = false, .decode_per_peer = false};
    // Uncompressed buckets travel in the same two phases, as fp32 slices.
    m.rounds.push_back({"slices, then the owners' means (dense ones in fp32)", Collective::kScatter,
                        messages + kF32 * dense});
  } else if (linear) {
    m.rounds.push_back(
        {"dense + linear regions (fp32)", Collective::kAllreduce, kF32 * dense + f32});
    if (f16 > 0) m.rounds.push_back({"linear regions (fp16)", Collective::kAllreduce, f16});
  } else {
    if (dense > 0) m.rounds.push_back({"dense (fp32)", Collective::kAllreduce, kF32 * dense});
    // Communicator::allgather_bytes: a size exchange, then the messages padded to the largest.
    m.rounds.push_back({"message sizes", Collective::kAllgather, 8.0});
    m.rounds.push_back({"messages", Collective::kAllgather, messages});
  }
  // ps.h: the push holds each key's message (fp32 for dense keys); the dense downlink
  // replies with the fp32 mean.
  m.ps_rounds.push_back(
      {"messages + dense, fp32 mean", messages + kF32 * dense, kF32 * static_cast<double>(total)});
  return m;
}

}  // namespace

std::size_t encoded_bytes(const CodecRegistry& registry, std::string_view spec, std::size_t n) {
  static std::mutex mu;
  static std::map<std::pair<std::string, std::size_t>, std::size_t> cache;
  const auto key = std::make_pair(std::string(spec), n);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  const std::unique_ptr<Memory> memory = registry.make_memory(spec, n);
  const std::vector<float> g = synthetic(n);
  std::vector<std::byte> out(memory->codec().max_encoded_bytes(n));
  StepContext ctx;
  ctx.seed = 1;
  ctx.world = 1;
  const std::size_t bytes = memory->compress(g, ctx, out);
  std::lock_guard<std::mutex> lock(mu);
  cache.emplace(key, bytes);
  return bytes;
}

namespace {

// What the flags after a spec ask for: an outer loop's shape, the scatter reducer.
struct MethodFlags {
  OuterPlan outer;  // sync_every 0: a per-step method
  bool scatter = false;
};

// "+--sync-every=30+--fragments=2+--reducer=scatter" -> MethodFlags; InvalidArgument naming
// what is wrong.
MethodFlags parse_method_flags(std::string_view flags) {
  MethodFlags m;
  OuterPlan& o = m.outer;
  o.flags = std::string(flags);
  auto integer = [](std::string_view key, std::string_view text) {
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size()) {
      throw InvalidArgument(std::string(key) + "=" + std::string(text) + ": not an integer");
    }
    return v;
  };
  bool outer_flag = false;
  std::string_view rest = flags;
  while (!rest.empty()) {
    rest.remove_prefix(1);  // '+'
    const std::size_t next = rest.find('+');
    const std::string_view flag = rest.substr(0, next);
    rest = next == std::string_view::npos ? std::string_view() : rest.substr(next);
    const std::size_t eq = flag.find('=');
    const std::string_view key = flag.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? "" : flag.substr(eq + 1);
    outer_flag = outer_flag || key != "--reducer";
    if (key == "--sync-every") {
      o.sync_every = integer(key, value);
    } else if (key == "--fragments") {
      o.fragments = static_cast<int>(integer(key, value));
    } else if (key == "--delay") {
      o.delay = integer(key, value);
    } else if (key == "--reducer") {
      if (value != "scatter" && value != "auto") {
        throw InvalidArgument("'" + std::string(flag) +
                              "': advise models --reducer=scatter (or auto, the default)");
      }
      m.scatter = value == "scatter";
    } else if (key != "--outer" && key != "--mix") {  // no cost of their own
      throw InvalidArgument("'" + std::string(flag) +
                            "': a method takes --reducer=scatter, and an outer loop "
                            "--sync-every=H, --fragments=F, --delay=D, --outer=RULE, --mix=A");
    }
  }
  if (!outer_flag) return m;  // only --reducer: a per-step method
  if (o.sync_every < 1) throw InvalidArgument("an outer loop needs --sync-every=H with H >= 1");
  if (o.fragments < 1 || o.sync_every % o.fragments != 0) {
    throw InvalidArgument(
        "--fragments=" + std::to_string(o.fragments) +
        " must be at least 1 and divide --sync-every=" + std::to_string(o.sync_every));
  }
  if (o.delay < 0 || o.delay >= o.sync_every / o.fragments) {
    throw InvalidArgument("--delay=" + std::to_string(o.delay) + " must be in [0, " +
                          std::to_string(o.sync_every / o.fragments) + ")");
  }
  return m;
}

}  // namespace

MethodPlan plan_method(std::string_view method, std::span<const ParamInfo> params,
                       const PlanOptions& options, const CodecRegistry& registry) {
  const std::size_t plus = method.find('+');
  const std::string_view spec = method.substr(0, plus);
  const std::vector<BucketPlan> buckets = plan_buckets(params, options.layout);
  const SpecNode node = spec == "dense" ? SpecNode{} : parse_spec(spec);
  const MethodFlags flags =
      plus == std::string_view::npos ? MethodFlags{} : parse_method_flags(method.substr(plus));
  // The method's own refusals under scatter (a scheme, a named memory), as gradcomp train
  // gives them; "none" is then the codec it is, sent in slices, not the dense allreduce.
  if (flags.scatter) (void)Method::parse(spec, {.reducer = ReducerKind::kScatter}, registry);
  const bool dense = !flags.scatter && is_dense(spec, node, registry);
  const SchemeDescription* scheme = dense || node.inner ? nullptr : registry.find_scheme(node.name);
  auto plan_of = [&](std::span<const BucketPlan> bs) {
    if (dense) return plan_dense(spec, bs);
    if (scheme != nullptr) return plan_scheme(spec, *scheme, node, bs);
    return plan_codec(spec, registry, bs, flags.scatter);
  };
  // The whole model's plan gives the byte counts and the parameter server's rounds; the
  // allreduce topology's collectives are those of each exchange group in turn.
  MethodPlan m = plan_of(buckets);
  m.rounds.clear();
  int number = 0;
  const double group_mb = options.min_group_mb.value_or(default_group_mb(m.traits.dense));
  for (const std::vector<std::size_t>& group : exchange_groups(buckets, group_mb)) {
    std::vector<BucketPlan> members;
    for (std::size_t b : group) members.push_back(buckets[b]);
    const std::string tag = "group " + std::to_string(++number) + " (" + describe(members) + "): ";
    // A group without a compressible bucket is averaged densely (GradientExchange).
    const bool compressed = std::any_of(members.begin(), members.end(),
                                        [](const BucketPlan& b) { return b.compressible; });
    for (Round r : (compressed ? plan_of(members) : plan_dense(spec, members)).rounds) {
      r.what = tag + r.what;
      m.rounds.push_back(std::move(r));
    }
    for (Round r : plan_dense("none", members).rounds) {
      r.what = tag + r.what;
      m.dense_rounds.push_back(std::move(r));
    }
  }
  if (flags.outer.sync_every == 0) {
    // A per-step method's flags (--reducer=scatter) stay in its name, so that the table
    // tells it from the same codec gathered.
    m.outer.flags = flags.outer.flags;
    return m;
  }
  // An outer loop: one exchange job per fragment (dist::OuterLoop), its pieces together.
  m.outer = flags.outer;
  m.rounds.clear();
  const std::vector<std::vector<BucketPlan>> fragments =
      fragment_pieces(buckets, m.outer.fragments);
  for (std::size_t f = 0; f < fragments.size(); ++f) {
    const std::vector<BucketPlan>& members = fragments[f];
    FragmentPlan fp;
    for (const BucketPlan& b : members) fp.compressed_elements += b.compressible ? b.numel : 0;
    if (members.empty()) continue;
    const std::string tag = "fragment " + std::to_string(f) + " (" + describe(members) + "): ";
    const bool compressed = fp.compressed_elements > 0;
    // Each fragment's job starts with the ranks' check that they took the same inner
    // steps (dist::OuterLoop::check_round_agrees): one allgather of a config field of
    // about 60 bytes, in two collectives (sizes, then the fields). Latency-bound.
    std::vector<Round> rounds = {{"inner-step check: sizes", Collective::kAllgather, 8.0},
                                 {"inner-step check", Collective::kAllgather, 64.0}};
    for (Round& r : (compressed ? plan_of(members) : plan_dense(spec, members)).rounds) {
      rounds.push_back(std::move(r));
    }
    for (Round& r : rounds) {
      r.what = tag + r.what;
      fp.rounds.push_back(r);
      m.rounds.push_back(std::move(r));
    }
    m.fragments.push_back(std::move(fp));
  }
  return m;
}

}  // namespace gradcomp::advise
