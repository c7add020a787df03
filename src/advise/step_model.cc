// The step model and the ranking; see step_model.h.
#include "gradcomp/advise/step_model.h"

#include <algorithm>
#include <map>

#include "gradcomp/error.h"

namespace gradcomp::advise {

namespace {

double round_seconds(const Round& r, const Scenario& s, const Link& link) {
  switch (r.kind) {
    case Collective::kAllreduce:
      return allreduce_seconds(r.bytes, s.workers, link);
    case Collective::kAllgather:
      return allgather_seconds(r.bytes, s.workers, link);
    case Collective::kScatter:
      return scatter_seconds(r.bytes, s.workers, link);
  }
  return 0.0;
}

double round_bytes(const Round& r, int workers) {
  switch (r.kind) {
    case Collective::kAllreduce:
      return allreduce_bytes(r.bytes, workers);
    case Collective::kAllgather:
      return allgather_bytes(r.bytes, workers);
    case Collective::kScatter:
      return scatter_bytes(r.bytes, workers);
  }
  return 0.0;
}

// An outer loop: every H / F inner steps one fragment is exchanged, its encode, rounds
// and decode one after the other on the exchange thread; with a delay of D steps the
// worker computes meanwhile, so only what outlasts D steps' compute is waited for (and on
// shared cores that exchange slows the compute: kOverlappedExchangeCpuPerByte).
// Per inner step: compute + (the F fragments' waits) / H.
void predict_outer_loop(const MethodPlan& plan, const Scenario& s, const Link& link,
                        const CodecSpeed& speed, Prediction& p) {
  if (s.topology == Topology::kPsSync) {
    p.available = false;
    p.note = "outer loops run on allreduce";
    return;
  }
  const double h = static_cast<double>(plan.outer.sync_every);
  const double decodes = plan.traits.decode_per_peer ? static_cast<double>(s.workers) : 1.0;
  const double f = oversubscription(s);
  std::vector<double> rounds;  // each fragment's exchange: encode + collectives + decode
  double encode = 0, decode = 0, comm = 0;
  for (const FragmentPlan& fp : plan.fragments) {
    const double elems = static_cast<double>(fp.compressed_elements);
    const double enc = f * speed.encode * elems;
    const double dec = f * speed.decode * elems * decodes;
    double t = 0;
    for (const Round& r : fp.rounds) {
      const double rt = round_seconds(r, s, link);
      p.rounds.push_back({r.what, to_string(r.kind), r.bytes, rt});
      t += rt;
      p.bytes_sent += round_bytes(r, s.workers) / h;
      if (rt > 0) ++p.collectives;
    }
    encode += enc;
    decode += dec;
    comm += t;
    rounds.push_back(enc + t + dec);
  }
  if (plan.outer.delay > 0 && f > 1.0) p.compute_s += s.overlapped_exchange_cpu * p.bytes_sent;
  double waited = 0;
  for (const double round : rounds) {
    waited += plan.outer.delay > 0
                  ? std::max(0.0, round - static_cast<double>(plan.outer.delay) * p.compute_s)
                  : round;
  }
  p.comm_s = comm / h;
  if (plan.outer.delay > 0) {
    // Encode and decode are in the wait: all of it runs on the exchange thread.
    p.encode_s = 0;
    p.decode_s = 0;
    p.exposed_s = waited / h;
  } else {
    p.encode_s = encode / h;
    p.decode_s = decode / h;
    p.exposed_s = comm / h;
  }
}

// Scenario::device's pricing (step_model.h): the device reducer's encode, decode and copies,
// or the staging of the whole gradient.
void price_device(const MethodPlan& plan, const Scenario& s, Prediction& p) {
  const DeviceModel& d = *s.device;
  if (plan.traits.scheme && plan.family == "powersgd" && plan.outer.sync_every == 0) {
    // The device reducer's PowerSGD: its collectives' buffers (P + dense, Q) cross both ways.
    double allreduced = 0.0;
    for (const Round& r : plan.rounds) allreduced += r.bytes;
    p.on_device = true;
    p.speed_source = "device model";
    p.encode_s = kDevicePowerSgdPasses * 4.0 * static_cast<double>(plan.compressed_elements) /
                     d.memory_bandwidth +
                 d.matrix_overhead_s * static_cast<double>(plan.compressed_buckets);
    p.decode_s = 0.0;  // in the passes above (P Q^T)
    p.pcie_s = 2.0 * allreduced / d.pcie_bandwidth;
    return;
  }
  const std::optional<std::string> codec = device_codec_spec(plan);
  const CodecSpeed* speed = codec ? d.speeds.find(*codec) : nullptr;
  if (speed == nullptr) {
    p.pcie_s = 2.0 * plan.gradient_bytes / d.pcie_bandwidth;
    return;
  }
  const double w = static_cast<double>(s.workers);
  const double elems = static_cast<double>(plan.compressed_elements);
  p.on_device = true;
  p.speed_source = "device " + speed->source;
  const double dense_bytes = std::max(0.0, plan.gradient_bytes - 4.0 * elems);
  if (plan.family == "scatter") {
    // The device scatter reducer (src/device/scatter.cc): every slice encoded, then the
    // owned slice's mean (1/W more); the W messages of the owned slice decoded, then every
    // owner's (two decodes an element). Across PCIe: the slices' messages out (m), the owned
    // slice's W messages in (m), the mean's message out (m/W), the owners' messages in (m).
    p.encode_s = speed->encode * elems * (1.0 + 1.0 / w) +
                 d.bucket_overhead_s * static_cast<double>(plan.compressed_buckets);
    p.decode_s = speed->decode * elems * 2.0;
    p.pcie_s = ((3.0 + 1.0 / w) * plan.message_bytes + 2.0 * dense_bytes) / d.pcie_bandwidth;
    return;
  }
  p.encode_s =
      speed->encode * elems + d.bucket_overhead_s * static_cast<double>(plan.compressed_buckets);
  p.decode_s = speed->decode * elems * w;
  p.pcie_s = ((1.0 + w) * plan.message_bytes + 2.0 * dense_bytes) / d.pcie_bandwidth;
}

// An outer loop on GPUs (device/parameter_staging.h): each round copies its fragment's
// parameters to the host and the merged weights back, and with a delay fetches them again
// at the merge: every parameter 2 (3) times every H steps, blocking the training thread.
// The round's codec runs on the host, at the host's speed.
void price_outer_staging(const MethodPlan& plan, const DeviceModel& d, Prediction& p) {
  const double copies = plan.outer.delay > 0 ? 3.0 : 2.0;
  p.pcie_s =
      copies * plan.gradient_bytes / d.pcie_bandwidth / static_cast<double>(plan.outer.sync_every);
}

}  // namespace

double oversubscription(const Scenario& s) {
  if (s.cores <= 0) return 1.0;
  return std::max(1.0, static_cast<double>(s.workers) / s.cores);
}

Prediction predict(const MethodPlan& plan, const Scenario& s, const SpeedTable& speeds) {
  if (s.workers < 1) throw InvalidArgument("workers must be >= 1");
  if (!(s.link.bandwidth > 0)) throw InvalidArgument("bandwidth must be > 0");
  Prediction p;
  p.spec = plan.spec + plan.outer.flags;
  p.family = plan.family;
  p.traits = plan.traits;
  p.accuracy_points = accuracy_cost(p.spec);
  p.compressed_buckets = plan.compressed_buckets;
  const double f = oversubscription(s);
  Link link = s.link;
  link.collective_overhead *= f;
  link.latency += s.oversubscribed_hop_delay * (f - 1.0);
  p.compute_s = f * s.compute_s;

  const CodecSpeed speed = speed_of(plan, speeds);
  if (!plan.traits.dense && speed.source.empty()) {
    throw InvalidArgument("no codec speed for '" + plan.spec +
                          "' (measure it: drop --codec-speeds, or add it to the bench file)");
  }
  p.speed_source = speed.source;
  const double elems = static_cast<double>(plan.compressed_elements);
  p.encode_s = f * speed.encode * elems;

  if (plan.outer.sync_every > 0) {
    predict_outer_loop(plan, s, link, speed, p);
    if (!p.available) return p;
  } else if (s.topology == Topology::kPsSync) {
    if (plan.ps_rounds.empty()) {
      p.available = false;
      p.note = plan.ps_note;
      return p;
    }
    for (const PsRound& r : plan.ps_rounds) {
      const double t = ps_seconds(r.push_bytes, r.pull_bytes, s.workers, s.servers, link);
      p.rounds.push_back({r.what, "ps", r.push_bytes + r.pull_bytes, t});
      p.comm_s += t;
      p.bytes_sent += r.push_bytes;
      ++p.collectives;
    }
    // The servers decode every worker's messages (W / S each) before they can reply.
    const double per_server = std::max(1.0, static_cast<double>(s.workers) / s.servers);
    p.decode_s = plan.traits.dense ? 0.0 : f * speed.decode * elems * per_server;
    p.exposed_s = p.comm_s;
  } else {
    for (const Round& r : plan.rounds) {
      const double t = round_seconds(r, s, link);
      p.rounds.push_back({r.what, to_string(r.kind), r.bytes, t});
      p.comm_s += t;
      p.bytes_sent += round_bytes(r, s.workers);
      if (t > 0) ++p.collectives;
    }
    const double decodes = plan.traits.decode_per_peer ? static_cast<double>(s.workers) : 1.0;
    p.decode_s = f * speed.decode * elems * decodes;
    const double hidden =
        plan.traits.overlappable ? s.overlap * s.backward_share * p.compute_s : 0.0;
    p.exposed_s = std::max(0.0, p.comm_s - hidden);
  }
  if (s.device && !plan.traits.dense && s.topology == Topology::kAllreduce &&
      plan.outer.sync_every == 0) {
    price_device(plan, s, p);
  }
  if (s.device && plan.outer.sync_every > 0) price_outer_staging(plan, *s.device, p);
  p.step_s = p.compute_s + p.encode_s + p.decode_s + p.pcie_s + p.exposed_s;
  return p;
}

std::optional<std::string> device_codec_spec(const MethodPlan& plan,
                                             const CodecRegistry& registry) {
  // An allgather's codec (decoded once per peer) or the scatter reducer's run on the device;
  // a linear codec's allreduce does not.
  const bool gathered = plan.traits.decode_per_peer || plan.family == "scatter";
  if (plan.traits.dense || plan.traits.scheme || !gathered || plan.outer.sync_every > 0) {
    return std::nullopt;
  }
  const SpecNode node = parse_spec(plan.canonical);
  const SpecNode* codec = &node;
  if ((node.name == "ef" || node.name == "efm" || node.name == "noef") && node.inner) {
    codec = node.inner.get();
  }
  if (node.name == "dgc") {
    // The device reducer's DGC selects on its accumulator with top-k's selection (two more
    // passes, over u and v, than error feedback makes): priced as top-k at its density
    // after the warm-up.
    std::string density = "0.001", sample = "0.01";
    for (const auto& [key, value] : node.params) {
      if (key == "density") density = value;
      if (key == "sample") sample = value;
    }
    return registry
        .make_codec(parse_spec("topk:ratio=" + density + ",select=auto,sample=" + sample))
        ->spec();
  }
  if (registry.find(codec->name) == nullptr) return std::nullopt;  // another named memory
  return registry.make_codec(*codec)->spec();
}

std::vector<Prediction> predict_all(const std::vector<MethodPlan>& plans, const Scenario& s,
                                    const SpeedTable& speeds) {
  MethodPlan dense;
  dense.spec = "none";
  dense.canonical = "none";
  dense.family = "dense";
  dense.traits = kDenseTraits;
  if (!plans.empty()) {
    dense.gradient_bytes = plans.front().gradient_bytes;
    dense.rounds = plans.front().dense_rounds;
    if (dense.rounds.empty()) {
      dense.rounds.push_back({"fp32 gradient", Collective::kAllreduce, dense.gradient_bytes});
    }
    dense.ps_rounds.push_back({"fp32", dense.gradient_bytes, dense.gradient_bytes});
  }
  const Prediction base = predict(dense, s, speeds);
  std::vector<Prediction> out;
  for (const MethodPlan& m : plans) {
    Prediction p = predict(m, s, speeds);
    p.ratio = p.bytes_sent > 0 ? base.bytes_sent / p.bytes_sent : 0.0;
    p.speedup = p.available && p.step_s > 0 ? base.step_s / p.step_s : 0.0;
    out.push_back(std::move(p));
  }
  std::stable_sort(out.begin(), out.end(), [](const Prediction& a, const Prediction& b) {
    if (a.available != b.available) return a.available;
    if (a.step_s != b.step_s) return a.step_s < b.step_s;
    return a.bytes_sent < b.bytes_sent;
  });
  int r = 0;
  for (Prediction& p : out) p.rank = p.available ? ++r : 0;
  return out;
}

std::optional<double> accuracy_cost(const std::string& spec) {
  // docs/measurements/accuracy.md, column "vs dense (points)". Update both together.
  static const std::map<std::string, double, std::less<>> table = {
      // Every method with its default spec (3 seeds).
      {"none", 0.0},
      {"topk:ratio=0.01", -0.42},
      {"efm(topk:ratio=0.01)", -0.42},  // what topk:ratio=0.01 runs as
      {"dgc:density=0.001", -0.27},
      {"2bit", -0.49},
      {"efsign", -0.37},
      {"fetchsgd", -0.41},
      {"sketched-sgd", -2.52},
      {"powersgd", -0.28},
      {"qsgd", -0.14},
      {"terngrad", -0.19},
      {"atomo:budget=3", -0.63},
      {"fp16", -0.09},  // allreduced (--reducer allreduce's default)
      // Variants.
      {"2bit:scale=1", -0.78},
      {"2bit:scale=3", -0.56},
      {"powersgd:rank=2", -0.74},
      {"ef(topk:ratio=0.01)", -1.02},
      {"ef(2bit)", -1.37},
      {"ef(2bit:threshold=0.5)", -4.61},
      {"ef(efsign)", -1.42},
      {"threshold", -0.43},
      {"randomk", -1.81},
      {"1bit", -6.47},
      {"sketch", -2.95},
      {"sketched-sgd:ratio=0.01,rows=5,table=0.025", -2.58},  // an earlier default geometry
      {"fetchsgd:rows=5,ratio=0.01,table=0.1", -3.93},
      // Outer loops (docs/algorithms/outer-loop.md's table: the 3-epoch MLP, one seed).
      {"none+--sync-every=10", -0.64},
      {"none+--sync-every=30", -0.12},
      {"none+--sync-every=30+--outer=average", -0.96},
      {"fp16+--sync-every=30", -0.18},
      {"none+--sync-every=50", -0.28},
      {"none+--sync-every=100", -0.65},
      {"ef(chunktopk)+--sync-every=30+--outer=sparseloco", -1.72},
  };
  auto it = table.find(spec);
  if (it == table.end()) return std::nullopt;
  return it->second;
}

}  // namespace gradcomp::advise
