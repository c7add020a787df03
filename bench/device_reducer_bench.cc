// The device reducers (src/device/allgather.cc, powersgd.cc) on ResNet-50's 161 tensors, laid
// out as the DDP hook lays them out (1-D tensors, those under 1024 elements and the
// smallest 1% of the elements stay dense), on CPU tensors, a world of one over Gloo:
//   step/<method>/batched      the codec's batch (DeviceCodec::batches: every device
//                              codec; GRADCOMP_DEVICE_BATCH=1, as on CUDA by default)
//   step/<method>/one_by_one   one bucket at a time (GRADCOMP_DEVICE_BATCH=0, as on the CPU)
//   step/powersgd:rank=2       the device PowerSGD reducer
//   scatter/<method>           the device scatter reducer (src/device/scatter.cc; batched
//                              whatever the device: its slices are runs of each tensor)
// A GPU pays for each ATen call a launch and for each host sync a wait for the device; a
// CPU run measures neither, but it can count them. Counters per step:
//   aten_calls   the ATen operators gradcomp calls (those entered from outside any other
//                operator: what the reducer asks the dispatcher for, about one kernel
//                launch each on a GPU)
//   host_syncs   those that wait for the device on a GPU: nonzero (its output size), item(),
//                and the blocking copies between host and device (.to() naming a device,
//                non_blocking false: the payloads to the host, the gathered messages and
//                dense means back). The dense buckets' copy_ to the host, one a step in both
//                modes, is not counted.
// Time per step here is the CPU's; on a GPU run scripts/bench_ddp_gpu.py times both modes.
#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gradcomp/device/reducer.h"
#include "gradcomp/dist/communicator.h"
#include "gradcomp/layout.h"
#include "gradcomp/method.h"

namespace gradcomp {
namespace {

// torchvision's resnet50: (name, shape) in parameter order.
std::vector<std::pair<std::string, std::vector<std::int64_t>>> resnet50() {
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> p;
  const auto bn = [&](const std::string& name, std::int64_t c) {
    p.push_back({name + ".weight", {c}});
    p.push_back({name + ".bias", {c}});
  };
  p.push_back({"conv1.weight", {64, 3, 7, 7}});
  bn("bn1", 64);
  std::int64_t in = 64;
  const std::int64_t planes[4] = {64, 128, 256, 512};
  const int blocks[4] = {3, 4, 6, 3};
  for (int l = 0; l < 4; ++l) {
    for (int b = 0; b < blocks[l]; ++b) {
      const std::string pre = "layer" + std::to_string(l + 1) + "." + std::to_string(b) + ".";
      const std::int64_t w = planes[l];
      p.push_back({pre + "conv1.weight", {w, in, 1, 1}});
      bn(pre + "bn1", w);
      p.push_back({pre + "conv2.weight", {w, w, 3, 3}});
      bn(pre + "bn2", w);
      p.push_back({pre + "conv3.weight", {4 * w, w, 1, 1}});
      bn(pre + "bn3", 4 * w);
      if (b == 0) {
        p.push_back({pre + "downsample.0.weight", {4 * w, in, 1, 1}});
        bn(pre + "downsample.1", 4 * w);
      }
      in = 4 * w;
    }
  }
  p.push_back({"fc.weight", {1000, 2048}});
  p.push_back({"fc.bias", {1000}});
  return p;
}

// One shape per tensor, compressible as the hook's layout rules say.
std::vector<BucketShape> resnet50_shapes() {
  std::vector<ParamInfo> infos;
  for (const auto& [name, shape] : resnet50()) {
    std::int64_t numel = 1;
    for (const std::int64_t d : shape) numel *= d;
    infos.push_back({name, numel, static_cast<std::int64_t>(shape.size()), shape.front()});
  }
  LayoutOptions options;
  options.min_elements = 1024;
  options.dense_share = 0.01;
  std::vector<bool> dense(infos.size(), false);
  for (const BucketPlan& b : plan_buckets(infos, options)) {
    if (b.compressible) continue;
    for (const BucketPlan::Slot& s : b.slots) dense[s.param] = true;
  }
  std::vector<BucketShape> shapes;
  for (std::size_t i = 0; i < infos.size(); ++i) {
    shapes.push_back({static_cast<std::uint32_t>(i), static_cast<std::size_t>(infos[i].numel),
                      !dense[i], infos[i].dim >= 2 ? static_cast<std::size_t>(infos[i].rows) : 0});
  }
  return shapes;
}

// Counts the ATen operators entered from outside any other (per thread), and those of
// them that wait for a GPU.
struct Counts {
  std::atomic<std::int64_t> calls{0};
  std::atomic<std::int64_t> syncs{0};
};
Counts counts;
thread_local int depth = 0;

// A blocking host-device copy: aten::to with a device argument and non_blocking false.
bool blocking_copy(const at::RecordFunction& fn) {
  const auto op = fn.operator_name();
  if (!op || op->name != "aten::to") return false;
  const auto inputs = fn.inputs();
  // to.device(self, device, dtype, non_blocking, ...); to.dtype_layout(self, dtype, layout,
  // device, pin_memory, non_blocking, ...).
  const std::size_t device_at = op->overload_name == "device" ? 1 : 3;
  const std::size_t blocking_at = op->overload_name == "device" ? 3 : 5;
  if (op->overload_name != "device" && op->overload_name != "dtype_layout") return false;
  if (inputs.size() <= blocking_at || !inputs[device_at].isDevice()) return false;
  return inputs[blocking_at].isBool() && !inputs[blocking_at].toBool();
}

bool waits_for_device(const at::RecordFunction& fn) {
  const std::string name = fn.name();
  return name == "aten::nonzero" || name == "aten::item" || blocking_copy(fn);
}

at::CallbackHandle count_calls() {
  return at::addGlobalCallback(
      at::RecordFunctionCallback(
          [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
            if (depth++ == 0) {
              counts.calls.fetch_add(1, std::memory_order_relaxed);
              if (waits_for_device(fn)) counts.syncs.fetch_add(1, std::memory_order_relaxed);
            }
            return nullptr;
          },
          [](const at::RecordFunction&, at::ObserverContext*) { --depth; })
          .needsInputs(true)
          .scopes({at::RecordScope::FUNCTION}));
}

void bm_step(benchmark::State& state, const std::string& spec, bool batched,
             ReducerKind kind = ReducerKind::kAuto) {
  ::setenv("GRADCOMP_DEVICE_BATCH", batched ? "1" : "0", 1);
  dist::RendezvousConfig cfg;
  cfg.world_size = 1;
  dist::Communicator comm(dist::Store::in_process(), cfg);
  const std::vector<BucketShape> shapes = resnet50_shapes();
  auto reducer = device::make_device_reducer(Method::parse(spec, {.reducer = kind}), comm, shapes,
                                             at::Device(at::kCPU));
  ::unsetenv("GRADCOMP_DEVICE_BATCH");
  std::vector<at::Tensor> sources;
  std::unique_ptr<bool[]> compressed(new bool[shapes.size()]);
  std::int64_t elements = 0;
  int compressible = 0;
  at::manual_seed(0);
  for (std::size_t b = 0; b < shapes.size(); ++b) {
    sources.push_back(at::randn({static_cast<std::int64_t>(shapes[b].numel)}));
    compressed[b] = shapes[b].compressible;
    compressible += shapes[b].compressible ? 1 : 0;
    elements += static_cast<std::int64_t>(shapes[b].numel);
  }
  StepContext ctx;
  ctx.seed = 1;
  ctx.lr = 0.1f;
  ctx.momentum = 0.9f;
  // The buckets are views of one tensor, as a DDP bucket's slots are.
  const at::Tensor source = at::cat(sources);
  const at::Tensor bucket = at::empty_like(source);
  std::vector<at::Tensor> grads;
  std::int64_t at = 0;
  for (const at::Tensor& s : sources) {
    grads.push_back(bucket.narrow(0, at, s.numel()));
    at += s.numel();
  }
  const at::CallbackHandle handle = count_calls();
  std::int64_t calls = 0;
  std::int64_t syncs = 0;
  for (auto _ : state) {
    state.PauseTiming();
    bucket.copy_(source);
    counts.calls = 0;
    counts.syncs = 0;
    state.ResumeTiming();
    reducer->reduce(grads, std::span<const bool>(compressed.get(), shapes.size()), ctx);
    calls += counts.calls;
    syncs += counts.syncs;
    ++ctx.step;
  }
  at::removeCallback(handle);
  const auto steps = static_cast<double>(state.iterations());
  state.counters["aten_calls"] = static_cast<double>(calls) / steps;
  state.counters["host_syncs"] = static_cast<double>(syncs) / steps;
  state.counters["tensors"] = static_cast<double>(shapes.size());
  state.counters["compressed"] = compressible;
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 4 * elements);
}

const char* const kSpecs[] = {
    "efm(topk:ratio=0.01)", "ef(topk:ratio=0.001)", "2bit", "2bit:threshold=0.5", "ef(1bit)",
    "ef(efsign)",           "dgc:density=0.001"};

// The device PowerSGD reducer (src/device/powersgd.cc): no batches to switch.
const char* const kSchemes[] = {"powersgd:rank=2"};

// The device scatter reducer: int (its default codec) and top-k.
const char* const kScatterSpecs[] = {"int", "efm(topk:ratio=0.01)"};

int register_all() {
  for (const char* spec : kSchemes) {
    benchmark::RegisterBenchmark(("step/" + std::string(spec)).c_str(),
                                 [spec](benchmark::State& s) { bm_step(s, spec, false); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  for (const char* spec : kScatterSpecs) {
    benchmark::RegisterBenchmark(
        ("scatter/" + std::string(spec)).c_str(),
        [spec](benchmark::State& s) { bm_step(s, spec, true, ReducerKind::kScatter); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  for (const char* spec : kSpecs) {
    for (const bool batched : {true, false}) {
      benchmark::RegisterBenchmark(
          ("step/" + std::string(spec) + (batched ? "/batched" : "/one_by_one")).c_str(),
          [spec, batched](benchmark::State& s) { bm_step(s, spec, batched); })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
  return 0;
}
const int registered = register_all();

}  // namespace
}  // namespace gradcomp

BENCHMARK_MAIN();
