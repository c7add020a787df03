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
// Oversubscribed workers (W on C < W cores) whose outer loop overlaps its exchange with
// compute (--delay > 0): the exchange thread's Gloo traffic takes CPU from the inner
// steps, compute += this * bytes sent per worker per step. Fit on the lab at 1 Gbit/s
// (4 workers on 2 cores, the MLP: +2.0 ms a step at 0.36 MB). The lab's userspace delay
// line costs 44 ns a byte more (scripts/netlab_report.py passes it; docs/cost-model.md).
inline constexpr double kOverlappedExchangeCpuPerByte = 6e-9;
// Goodput over nominal bandwidth for bulk transfers: the network lab's dense allreduce
// moved its 21.49 MB per worker in 196 ms at 1 Gbit/s and 1956 ms at 100 Mbit/s (after
// the overhead above), both 0.88 of the nominal rate.
inline constexpr double kLinkEfficiency = 0.88;

// Gradients on GPUs (`advise --device-speeds FILE`): compute_s is the GPU's step, and what
// crosses between host and device is priced at pcie_bandwidth each way:
//   dense        DDP's own allreduce (NCCL): nothing crosses;
//   on device    a method the device reducer runs (gradcomp/device/reducer.h: an allgather
//                of a codec with a row in `speeds`, under ef, efm or noef): encode and
//                decode at the device's speed; this worker's messages cross once, the W
//                gathered ones back, the dense share both ways;
//   powersgd     the device reducer's PowerSGD: the products and the residual on the
//                device, kDevicePowerSgdPasses passes over the factored matrices at
//                memory_bandwidth, plus matrix_overhead_s per factored matrix (launches,
//                the copies of P and Q, Gram-Schmidt of P on the host); P, Q and the dense
//                share cross PCIe both ways;
//   staged       any other compressed method: the whole gradient crosses both ways and the
//                codec runs on the host, as without a device.
// The device reducer also pays a fixed cost per compressed bucket (kernel launches, the
// host synchronisations of each bucket's payload copy): bucket_overhead_s, in its encode.
// step = compute + encode + decode + pcie + exposed.
//
// The fixed costs are fit on one H200 run (docs/measurements/gpu.md, run 4, 2026-11-28),
// DDP on ResNet-50, batch 64, a world of one, against DDP alone (38.5 ms):
// - efm(topk:ratio=0.01) (ATen selection, the path 1% takes): 36.1 ms more, for 0.78 ms of
//   predicted encode, decode and copies, over its 42 compressed buckets: 0.84 ms each
//   (an H100 gave 1.48 on 2026-11-27, before the payloads crossed in one copy);
// - powersgd:rank=2: 7.0 ms more over its 54 factored matrices, less 0.2 ms of passes:
//   0.126 ms each. On AlexNet (8 matrices, 61 M elements) this predicts 1.5 ms against a
//   measured 3.0: its few large matrices cost more than the fit says.
inline constexpr double kDeviceBucketOverhead = 0.84e-3;
inline constexpr double kDevicePowerSgdMatrixOverhead = 0.126e-3;
// M = e + g (read 2, write 1), P = M Q, Q = M^T P, e = M - P Q^T (read 2, write 1): seven
// passes of 4 bytes per factored element.
inline constexpr double kDevicePowerSgdPasses = 7.0;

struct DeviceModel {
  double pcie_bandwidth = 25e9;  // bytes/s each way (PCIe 4.0 x16's usable ~25 GB/s)
  SpeedTable speeds;             // the device codecs' per-element encode (with EF), decode
  double bucket_overhead_s = kDeviceBucketOverhead;
  // The device's memory bandwidth (read + written), bytes/s: the copy an H100 measured
  // (2909 GB/s, run 2; an H200 3960 GB/s, run 4).
  double memory_bandwidth = 2.9e12;
  double matrix_overhead_s = kDevicePowerSgdMatrixOverhead;
};

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
  double oversubscribed_hop_delay = kOversubscribedHopDelay;       // seconds per unit of f - 1
  double overlapped_exchange_cpu = kOverlappedExchangeCpuPerByte;  // seconds per byte, f > 1
  std::optional<DeviceModel> device = {};                          // the gradients on GPUs
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
  std::size_t compressed_buckets = 0;  // codec specs
  double compute_s = 0.0, encode_s = 0.0, decode_s = 0.0, comm_s = 0.0, exposed_s = 0.0;
  double pcie_s = 0.0;     // host <-> device copies (Scenario::device)
  bool on_device = false;  // encoded and decoded on the device (Scenario::device)
  double step_s = 0.0;
  double speedup = 0.0;                   // dense's step / step
  std::optional<double> accuracy_points;  // vs dense, from docs/measurements/accuracy.md
  std::string speed_source;
  std::vector<RoundCost> rounds;
  int rank = 0;  // 1 = fastest
};

// The canonical spec of the codec a method would run on the device reducer (an allgather
// of a codec under ef, efm or noef; DGC as top-k at its density), looked up in
// DeviceModel::speeds; nullopt for dense, schemes, other named memories, linear codecs'
// allreduce and outer loops.
std::optional<std::string> device_codec_spec(const MethodPlan& plan,
                                             const CodecRegistry& registry = builtin_registry());

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
