// Per-method wire plans; see messages.h.
#include "gradcomp/advise/messages.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "detail/count_sketch.h"
#include "detail/sketch_geometry.h"
#include "gradcomp/error.h"
#include "gradcomp/memory.h"

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

// A share for a spec string: 3 significant digits (0.09, not 0.0900003), within (0, 1].
std::string format_share(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", std::clamp(x, 1e-6, 1.0));
  return buf;
}

std::size_t total_numel(std::span<const BucketPlan> buckets) {
  std::size_t total = 0;
  for (const BucketPlan& b : buckets) total += b.numel;
  return total;
}

bool is_dense_spec(std::string_view spec) { return spec == "none" || spec == "dense"; }

// Bytes of a linear region's element type.
double dtype_bytes(WireDType d) { return d == WireDType::kFloat32 ? 4.0 : 2.0; }

// powersgd.cc's rule: a matrix goes low rank when its factors are under half its size.
bool powersgd_worth(std::size_t rows, std::size_t cols, std::size_t rank) {
  return rows * cols > 2 * rank * (rows + cols);
}

MethodPlan plan_dense(std::string_view spec, std::span<const BucketPlan> buckets) {
  const std::size_t total = total_numel(buckets);
  MethodPlan m;
  m.spec = std::string(spec);
  m.canonical = "none";
  m.family = "dense";
  m.gradient_bytes = kF32 * static_cast<double>(total);
  m.rounds.push_back({"fp32 gradient", Collective::kAllreduce, kF32 * static_cast<double>(total)});
  m.ps_rounds.push_back({"fp32 push, fp32 mean", kF32 * static_cast<double>(total),
                         kF32 * static_cast<double>(total)});
  return m;
}

MethodPlan plan_scheme(std::string_view spec, const SchemeDescription& info, const SpecNode& node,
                       std::span<const BucketPlan> buckets) {
  const std::size_t total = total_numel(buckets);
  MethodPlan m;
  m.spec = std::string(spec);
  m.canonical = canonical_scheme_spec(info, node);
  m.family = info.name;
  m.gradient_bytes = kF32 * static_cast<double>(total);
  const Params p = resolve_params(info.name, info.params, node);
  double dense = 0.0;  // elements sent as fp32 in the first round
  if (info.name == "powersgd") {
    const auto rank = static_cast<std::size_t>(p.get_int("rank"));
    m.rank = static_cast<int>(rank);
    double ps = 0.0, qs = 0.0;
    for (const BucketPlan& b : buckets) {
      const std::size_t cols = b.rows > 0 ? b.numel / b.rows : 0;
      if (b.compressible && b.rows > 0 && powersgd_worth(b.rows, cols, rank)) {
        ps += static_cast<double>(b.rows * rank);
        qs += static_cast<double>(cols * rank);
        m.compressed_elements += b.numel;
      } else {
        dense += static_cast<double>(b.numel);
      }
    }
    m.rounds.push_back({"P + dense", Collective::kAllreduce, kF32 * (ps + dense)});
    if (qs > 0) m.rounds.push_back({"Q", Collective::kAllreduce, kF32 * qs});
    m.ps_note = "powersgd runs on the allreduce topology only";
    return m;
  }
  const detail::SketchGeometry geo = detail::sketch_geometry_from(p);
  double cells = 0.0, candidates = 0.0, topk = 0.0;
  for (const BucketPlan& b : buckets) {
    if (b.compressible && b.numel > 0) {
      const std::uint32_t cols = detail::sketch_columns(b.numel, geo.rows, geo.cols, geo.table);
      const std::size_t k = detail::sketch_k_for(geo, b.numel);
      cells += static_cast<double>(geo.rows) * cols;
      topk += static_cast<double>(k);
      if (info.name == "sketched-sgd") {
        candidates +=
            static_cast<double>(std::min(b.numel, static_cast<std::size_t>(p.get_int("p2")) * k));
      }
      m.compressed_elements += b.numel;
    } else {
      dense += static_cast<double>(b.numel);
    }
  }
  m.rounds.push_back({"sketches + dense", Collective::kAllreduce, kF32 * (cells + dense)});
  if (m.compressed_elements > 0) {
    const double n = static_cast<double>(m.compressed_elements);
    const double decoded =
        info.name == "sketched-sgd" ? std::min(n, candidates) : std::min(n, topk);
    m.speed_spec = "sketch:rows=" + std::to_string(geo.rows) +
                   ",ratio=" + format_share(std::min(1.0, cells / n)) +
                   ",heavy=" + format_share(std::max(decoded / n, 1e-6));
  }
  if (info.name == "sketched-sgd") {
    if (candidates > 0) {
      m.rounds.push_back({"candidates' values", Collective::kAllreduce, kF32 * candidates});
    }
    // sketch_plan.h: push sketches, reply candidates (u32); push values, reply top-k
    // (index + value).
    m.ps_rounds.push_back(
        {"sketches + dense, candidates", kF32 * (cells + dense), kF32 * dense + 4.0 * candidates});
    m.ps_rounds.push_back({"candidates' values, top-k", kF32 * candidates, 8.0 * topk});
  } else {
    m.ps_note = info.name + " runs on the allreduce topology only";
  }
  return m;
}

MethodPlan plan_codec(std::string_view spec, const CodecRegistry& registry,
                      std::span<const BucketPlan> buckets) {
  const std::size_t total = total_numel(buckets);
  MethodPlan m;
  m.spec = std::string(spec);
  m.gradient_bytes = kF32 * static_cast<double>(total);
  const std::shared_ptr<const Codec> codec = registry.make_codec_of(spec);
  m.canonical = registry.make_memory(spec, 0)->spec();
  const bool linear = codec->traits().linear;
  m.family = linear ? "allreduce" : "allgather";
  m.decode_per_peer = !linear;
  double dense = 0.0, f32 = 0.0, f16 = 0.0, messages = 0.0;
  for (const BucketPlan& b : buckets) {
    if (!b.compressible) {
      dense += static_cast<double>(b.numel);
      continue;
    }
    m.compressed_elements += b.numel;
    const double bytes = static_cast<double>(encoded_bytes(registry, spec, b.numel));
    messages += bytes;
    if (linear) {
      const LinearRegion r = codec->linear_region(b.numel);
      (r.dtype == WireDType::kFloat16 ? f16 : f32) +=
          dtype_bytes(r.dtype) * static_cast<double>(r.count);
    }
  }
  m.message_bytes = messages;
  if (linear) {
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

MethodPlan plan_method(std::string_view spec, std::span<const ParamInfo> params,
                       const PlanOptions& options, const CodecRegistry& registry) {
  const std::vector<BucketPlan> buckets = plan_buckets(params, options.layout);
  const bool dense = is_dense_spec(spec);
  const SpecNode node = dense ? SpecNode{} : parse_spec(spec);
  const SchemeDescription* scheme = dense || node.inner ? nullptr : registry.find_scheme(node.name);
  auto plan_of = [&](std::span<const BucketPlan> bs) {
    if (dense) return plan_dense(spec, bs);
    if (scheme != nullptr) return plan_scheme(spec, *scheme, node, bs);
    return plan_codec(spec, registry, bs);
  };
  // The whole model's plan gives the byte counts and the parameter server's rounds; the
  // allreduce topology's collectives are those of each exchange group in turn.
  MethodPlan m = plan_of(buckets);
  m.rounds.clear();
  int number = 0;
  const double group_mb = options.min_group_mb.value_or(default_group_mb(m.family == "dense"));
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
  return m;
}

}  // namespace gradcomp::advise
