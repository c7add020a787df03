#include "sketch_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "gradcomp/dist/schemes.h"
#include "gradcomp/error.h"
#include "gradcomp/wire.h"

namespace gradcomp::dist::ps {

std::size_t SketchPlan::max_record_bytes(const PsKey& k) const {
  const SketchKey& sk = keys[k.id];
  std::size_t bytes = 4 * k.numel;
  if (sk.on) bytes = std::max({bytes, 4 * cells(k.id), 4 * sk.kc, 4 + 8 * sk.k});
  return bytes;
}

std::optional<SketchPlan> sketch_plan_for(const Method& method, std::span<const PsKey> keys) {
  if (!method.is_scheme()) return std::nullopt;
  if (!method.scheme()->runs_on_ps_sync || method.context().topology != Topology::kPsSync ||
      method.context().downlink != Downlink::kDense) {
    throw InvalidArgument("ps sketch plan: " + method.spec() +
                          " was not parsed for a ps-sync server with a dense downlink");
  }
  const Params& p = method.scheme_params();
  SketchPlan plan;
  plan.spec = method.canonical();
  plan.geo = sketch_scheme::geometry_from(p);
  plan.p2 = static_cast<std::size_t>(p.get_int("p2"));
  plan.momentum = static_cast<float>(p.get_float("momentum"));
  plan.mask = p.get_bool("mask");
  plan.keys.resize(keys.size());
  for (const PsKey& k : keys) {
    if (k.id >= keys.size()) throw Error("ps sketch plan: key ids out of order (internal error)");
    SketchKey& sk = plan.keys[k.id];
    if (!k.compressible || k.numel == 0) continue;
    sk.on = true;
    sk.cols = kernels::sketch_columns(k.numel, plan.geo.rows, plan.geo.cols, plan.geo.table);
    sk.k = sketch_scheme::k_for(plan.geo, k.numel);
    sk.kc = std::min(k.numel, plan.p2 * sk.k);
  }
  return plan;
}

std::size_t write_indices(std::span<const std::uint32_t> idx, std::span<std::byte> out) {
  for (std::size_t t = 0; t < idx.size(); ++t) store_le<std::uint32_t>(out.data() + 4 * t, idx[t]);
  return 4 * idx.size();
}

void read_indices(std::span<const std::byte> data, std::size_t n, std::size_t max,
                  std::uint32_t key, const std::string& who, std::vector<std::uint32_t>& out) {
  const std::string where = "ps " + who + ": key " + std::to_string(key) + " candidates: ";
  if (data.size() % 4 != 0 || data.size() / 4 > max) {
    throw CorruptMessage(where + std::to_string(data.size()) + " bytes, not at most " +
                         std::to_string(max) + " u32 coordinates");
  }
  out.resize(data.size() / 4);
  for (std::size_t t = 0; t < out.size(); ++t) {
    const auto i = load_le<std::uint32_t>(data.data() + 4 * t);
    if (i >= n || (t > 0 && i <= out[t - 1])) {
      throw CorruptMessage(where + "coordinate " + std::to_string(i) + " at position " +
                           std::to_string(t) + " is out of range (" + std::to_string(n) +
                           ") or not ascending");
    }
    out[t] = i;
  }
}

std::size_t write_sparse(std::span<const std::uint32_t> idx, std::span<const float> vals,
                         std::span<std::byte> out) {
  const std::size_t c = idx.size();
  store_le<std::uint32_t>(out.data(), static_cast<std::uint32_t>(c));
  for (std::size_t t = 0; t < c; ++t) {
    store_le<std::uint32_t>(out.data() + 4 + 4 * t, idx[t]);
    store_le<float>(out.data() + 4 + 4 * c + 4 * t, vals[t]);
  }
  return 4 + 8 * c;
}

void read_sparse(std::span<const std::byte> data, std::span<const std::uint32_t> allowed,
                 std::size_t max, std::uint32_t key, const std::string& who,
                 std::vector<std::uint32_t>& idx, std::vector<float>& vals) {
  const std::string where = "ps " + who + ": key " + std::to_string(key) + " update: ";
  if (data.size() < 4) throw CorruptMessage(where + "truncated count");
  const std::size_t c = load_le<std::uint32_t>(data.data());
  if (c > max || data.size() != 4 + 8 * c) {
    throw CorruptMessage(where + std::to_string(c) + " entries (at most " + std::to_string(max) +
                         ") in " + std::to_string(data.size()) + " bytes");
  }
  idx.resize(c);
  vals.resize(c);
  std::size_t a = 0;  // merge position in `allowed`
  for (std::size_t t = 0; t < c; ++t) {
    const auto i = load_le<std::uint32_t>(data.data() + 4 + 4 * t);
    while (a < allowed.size() && allowed[a] < i) ++a;
    if (a == allowed.size() || allowed[a] != i || (t > 0 && i <= idx[t - 1])) {
      throw CorruptMessage(where + "coordinate " + std::to_string(i) + " at position " +
                           std::to_string(t) + " is not an ascending candidate");
    }
    const auto v = load_le<float>(data.data() + 4 + 4 * c + 4 * t);
    if (!std::isfinite(v)) {
      throw CorruptMessage(where + "non-finite value at coordinate " + std::to_string(i));
    }
    idx[t] = i;
    vals[t] = v;
  }
}

}  // namespace gradcomp::dist::ps
