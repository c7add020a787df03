// The step model: one worker's step time under a method on a scenario, and the ranking.
//
//   f        = max(1, W / C) when all W workers share C cores (the network lab), else 1
//   compute  = f * compute_s                          (forward + backward)
//   encode   = f * encode/element * compressed elements
//   decode   = f * decode/element * compressed elements * (W for allgathered messages)
//   comm     = sum over the method's rounds of the collective's cost (collectives.h),
//              Gloo's per-collective overhead scaled by f
//   exposed  = max(0, comm - overlap * backward_share * compute) for methods whose only
//              collectives are allreduces of ready buffers (dense, linear codecs); comm
//              for the rest (their rounds depend on each other)
//   step     = compute + encode + decode + exposed ; speedup = dense's step / step
// See docs/cost-model.md. Torch-free.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gradcomp/advise/collectives.h"
#include "gradcomp/advise/messages.h"
#include "gradcomp/advise/speeds.h"

namespace gradcomp::advise {

enum class Topology { kAllreduce, kPsSync };

// Gloo over TCP, per collective (scheduling, waking the peer threads): fit on the network
// lab (4 workers on 2 cores, 1 Gbit/s and 100 Mbit/s) with the model's exchange groups
// and Gloo ring passes; the sittings are in docs/cost-model.md.
inline constexpr double kGlooCollectiveOverhead = 1.8e-3;
// Oversubscribed workers (W on C < W cores) wait to be scheduled at every hop of a ring:
// one-way latency added per unit of oversubscription, alpha += this * (f - 1). Fit on the
// lab with W = 8 on 2 cores (f = 4), PowerSGD at 1 Gbit/s (docs/cost-model.md).
inline constexpr double kOversubscribedHopDelay = 0.15e-3;
// Goodput over nominal bandwidth for bulk transfers: the network lab's dense allreduce
// moved its 21.49 MB per worker in 196 ms at 1 Gbit/s and 1956 ms at 100 Mbit/s (after
// the overhead above), both 0.88 of the nominal rate.
inline constexpr double kLinkEfficiency = 0.88;

struct Scenario {
  int workers = 4;
  Link link{.bandwidth = 125e6,
            .latency = 0.0,
            .collective_overhead = kGlooCollectiveOverhead,
            .efficiency = kLinkEfficiency};
  Topology topology = Topology::kAllreduce;
  int servers = 1;           // ps-sync
  double compute_s = 0.030;  // forward + backward of one worker on a core of its own
  double backward_share = 2.0 / 3.0;
  double overlap = 0.0;  // share of backward that can hide allreduce traffic
  int cores = 0;         // > 0: the W workers share this many cores
  double oversubscribed_hop_delay = kOversubscribedHopDelay;  // seconds per unit of f - 1
};

// One collective (or parameter-server exchange) of a prediction.
struct RoundCost {
  std::string what;
  std::string collective;  // "allreduce", "allgather" or "ps"
  double bytes = 0.0;      // the buffer, the largest message, or push + pull
  double seconds = 0.0;
};

struct Prediction {
  std::string spec;
  std::string family;  // the plan's label
  PlanTraits traits = {};
  bool available = true;  // false: the topology cannot run it (note says why)
  std::string note;
  double bytes_sent = 0.0;  // per worker per step
  double ratio = 0.0;       // dense's bytes / bytes_sent
  int collectives = 0;
  double compute_s = 0.0, encode_s = 0.0, decode_s = 0.0, comm_s = 0.0, exposed_s = 0.0;
  double step_s = 0.0;
  double speedup = 0.0;                   // dense's step / step
  std::optional<double> accuracy_points;  // vs dense, from docs/measurements/accuracy.md
  std::string speed_source;
  std::vector<RoundCost> rounds;
  int rank = 0;  // 1 = fastest
};

// Oversubscription factor f.
double oversubscription(const Scenario& s);

// One method. Throws InvalidArgument when a codec spec has no speed in `speeds`.
Prediction predict(const MethodPlan& plan, const Scenario& scenario, const SpeedTable& speeds);

// Every method, ranked by step time (ties: fewer bytes first); speedups against dense
// on the same scenario, whether or not "none" is among the plans. Unavailable methods
// come last, unranked (rank 0).
std::vector<Prediction> predict_all(const std::vector<MethodPlan>& plans, const Scenario& scenario,
                                    const SpeedTable& speeds);

// The project's accuracy table (docs/measurements/accuracy.md: MLP, 4 workers, 3
// epochs, --dense-share 0.01): points vs dense for a spec written as there.
std::optional<double> accuracy_cost(const std::string& spec);

}  // namespace gradcomp::advise
