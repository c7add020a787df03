#include "gradcomp/layout.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "gradcomp/error.h"
#include "gradcomp/json.h"

namespace gradcomp {

namespace {

// Which tensors stay dense (see the rules in layout.h).
std::vector<char> dense_tensors(std::span<const ParamInfo> params, const LayoutOptions& options) {
  std::vector<char> dense(params.size(), 0);
  double total = 0.0;
  std::vector<std::size_t> candidates;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ParamInfo& p = params[i];
    if (p.numel < 0) throw InvalidArgument("layout: " + p.name + " has negative numel");
    total += static_cast<double>(p.numel);
    if (p.dim <= 1 || p.numel < options.min_elements) {
      dense[i] = 1;
    } else {
      candidates.push_back(i);
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](std::size_t a, std::size_t b) { return params[a].numel < params[b].numel; });
  const double budget = options.dense_share * total;
  double used = 0.0;
  for (const std::size_t i : candidates) {
    used += static_cast<double>(params[i].numel);
    if (used > budget) break;
    dense[i] = 1;
  }
  return dense;
}

}  // namespace

std::vector<BucketPlan> plan_buckets(std::span<const ParamInfo> params,
                                     const LayoutOptions& options) {
  // Each named alone: a front end that sets only one (DiLoCo's min_elements) would
  // otherwise see the other's value in a message about its own.
  if (!(options.bucket_mb >= 0.0)) {
    throw InvalidArgument("layout: bucket_mb " + json_number(options.bucket_mb) + " must be >= 0");
  }
  if (options.min_elements < 0) {
    throw InvalidArgument("layout: min_elements " + std::to_string(options.min_elements) +
                          " must be >= 0");
  }
  if (!(options.dense_share >= 0.0 && options.dense_share <= 1.0)) {
    throw InvalidArgument("layout: dense_share " + std::to_string(options.dense_share) +
                          " must be in [0, 1]");
  }
  const std::vector<char> stays_dense = dense_tensors(params, options);
  const double cap_elements = options.bucket_mb * 1024.0 * 1024.0 / sizeof(float);
  std::vector<BucketPlan> out;
  BucketPlan dense;
  dense.compressible = false;
  BucketPlan* open = nullptr;  // the fused bucket still taking tensors
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ParamInfo& p = params[i];
    const auto n = static_cast<std::size_t>(p.numel);
    if (stays_dense[i]) {
      dense.slots.push_back({i, dense.numel, n});
      dense.numel += n;
      continue;
    }
    const bool fits = open != nullptr && options.bucket_mb > 0.0 &&
                      static_cast<double>(open->numel + n) <= cap_elements;
    if (!fits) {
      out.emplace_back();
      open = &out.back();
      open->id = static_cast<std::uint32_t>(out.size() - 1);
      open->name = p.name;
      open->rows = static_cast<std::size_t>(p.rows);
    } else {
      open->name += "+" + p.name;
      open->rows = 0;  // fused: no single matrix view
    }
    open->slots.push_back({i, open->numel, n});
    open->numel += n;
  }
  if (!dense.slots.empty()) {
    dense.id = static_cast<std::uint32_t>(out.size());
    dense.name = "dense(" + std::to_string(dense.slots.size()) + " tensors)";
    out.push_back(std::move(dense));
  }
  return out;
}

std::vector<BucketShape> bucket_shapes(std::span<const BucketPlan> plan) {
  std::vector<BucketShape> out;
  out.reserve(plan.size());
  for (const BucketPlan& b : plan) out.push_back({b.id, b.numel, b.compressible, b.rows});
  return out;
}

std::vector<std::size_t> hand_over_order(std::span<const BucketPlan> plan) {
  std::vector<std::size_t> order;
  order.reserve(plan.size());
  for (std::size_t b = plan.size(); b-- > 0;) {
    if (plan[b].compressible) order.push_back(b);
  }
  for (std::size_t b = 0; b < plan.size(); ++b) {
    if (!plan[b].compressible) order.push_back(b);
  }
  return order;
}

std::vector<std::vector<std::size_t>> exchange_groups(std::span<const BucketPlan> plan,
                                                      double min_group_mb) {
  if (!(min_group_mb >= 0) || !std::isfinite(min_group_mb)) {
    throw InvalidArgument("min_group_mb must be >= 0, got " + std::to_string(min_group_mb));
  }
  const double min_bytes = min_group_mb * 1024.0 * 1024.0;
  std::vector<std::vector<std::size_t>> groups;
  double bytes = 0;
  for (std::size_t b : hand_over_order(plan)) {
    if (groups.empty() || bytes >= min_bytes || min_bytes == 0) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(b);
    bytes += 4.0 * static_cast<double>(plan[b].numel);
  }
  if (groups.size() > 1 && bytes < min_bytes) {
    std::vector<std::size_t> last = std::move(groups.back());
    groups.pop_back();
    groups.back().insert(groups.back().end(), last.begin(), last.end());
  }
  return groups;
}

namespace {

// Elements [begin, begin + numel) of bucket b as a bucket of its own (slots cut to fit).
BucketPlan piece_of(const BucketPlan& b, std::size_t begin, std::size_t numel) {
  if (begin == 0 && numel == b.numel) return b;
  BucketPlan p;
  p.compressible = b.compressible;
  p.numel = numel;
  const std::size_t end = begin + numel;
  for (const BucketPlan::Slot& s : b.slots) {
    const std::size_t lo = std::max(begin, s.offset);
    const std::size_t hi = std::min(end, s.offset + s.numel);
    if (lo >= hi) continue;
    p.slots.push_back({s.param, lo - begin, hi - lo, s.param_offset + (lo - s.offset)});
  }
  if (b.rows > 0) {
    const std::size_t cols = b.numel / b.rows;
    p.rows = numel / cols;
    p.name =
        b.name + "[rows " + std::to_string(begin / cols) + ":" + std::to_string(end / cols) + "]";
  } else {
    p.name = b.name + "[" + std::to_string(begin) + ":" + std::to_string(end) + "]";
  }
  return p;
}

}  // namespace

std::vector<std::vector<BucketPlan>> fragment_pieces(std::span<const BucketPlan> plan,
                                                     int fragments) {
  if (fragments < 1)
    throw InvalidArgument("fragments must be >= 1, got " + std::to_string(fragments));
  const auto f_count = static_cast<std::size_t>(fragments);
  std::size_t total = 0;
  for (const BucketPlan& b : plan) total += b.compressible ? b.numel : 0;
  // Fragment f starts at element cut[f] of the compressible buckets laid end to end.
  std::vector<std::size_t> cut(f_count);
  for (std::size_t f = 0; f < f_count; ++f) {
    cut[f] = static_cast<std::size_t>(static_cast<long double>(total) * f / f_count + 0.5L);
  }
  std::vector<std::vector<BucketPlan>> out(f_count);
  std::vector<std::size_t> load(f_count, 0);
  std::uint32_t next_id = 0;
  std::size_t pos = 0;  // where the bucket starts in the sequence
  std::vector<const BucketPlan*> dense;
  for (const BucketPlan& b : plan) {
    if (!b.compressible) {
      dense.push_back(&b);
      continue;
    }
    // (first element in the bucket, fragment) of each piece, in order.
    std::vector<std::pair<std::size_t, std::size_t>> starts;
    const auto first =
        static_cast<std::size_t>(std::upper_bound(cut.begin(), cut.end(), pos) - cut.begin() - 1);
    starts.push_back({0, first});
    const std::size_t cols = b.rows > 0 ? b.numel / b.rows : 1;
    for (std::size_t f = first + 1; f < f_count && cut[f] < pos + b.numel; ++f) {
      std::size_t at = cut[f] - pos;
      if (cols > 1) at = (at + cols / 2) / cols * cols;  // the nearest row boundary
      if (at >= b.numel) break;                          // the next bucket starts it
      if (at == starts.back().first) {
        starts.back().second = f;  // the earlier fragment gets nothing of this bucket
      } else {
        starts.push_back({at, f});
      }
    }
    for (std::size_t k = 0; k < starts.size(); ++k) {
      const std::size_t begin = starts[k].first;
      const std::size_t end = k + 1 < starts.size() ? starts[k + 1].first : b.numel;
      BucketPlan p = piece_of(b, begin, end - begin);
      p.id = next_id++;
      load[starts[k].second] += p.numel;
      out[starts[k].second].push_back(std::move(p));
    }
    pos += b.numel;
  }
  for (const BucketPlan* d : dense) {
    const auto lightest =
        static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    BucketPlan p = *d;
    p.id = next_id++;
    load[lightest] += p.numel;
    out[lightest].push_back(std::move(p));
  }
  return out;
}

}  // namespace gradcomp
