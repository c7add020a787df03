// gradcomp._C.OuterLoop: gradcomp::dist::OuterLoop (local steps + compressed
// pseudo-gradients, gradcomp/dist/outer_loop.h) over a torch.distributed process group,
// on the memory of the caller's parameters. gradcomp.torch.DiLoCo drives it; the CLI's
// --sync-every and LibTorch's gradcomp::DiLoCo run the same object.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "gradcomp/device/parameter_staging.h"
#include "gradcomp/dist/outer_loop.h"
#include "gradcomp/dist/process_group.h"
#include "gradcomp/error.h"
#include "gradcomp/layout.h"
#include "gradcomp/method.h"

namespace py = pybind11;

namespace gradcomp::python {

namespace {

class PyOuterLoop {
 public:
  PyOuterLoop(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
              const std::vector<std::pair<std::string, at::Tensor>>& params,
              const std::string& compressor, const std::string& reducer,
              const dist::OuterLoopOptions& options, double timeout_seconds, bool stage_cpu) {
    if (!(timeout_seconds > 0)) throw InvalidArgument("DiLoCo: timeout must be positive");
    std::vector<ParamInfo> infos;
    for (const auto& [name, p] : params) {
      infos.push_back({name, p.numel(), p.dim(), p.dim() > 0 ? p.size(0) : 0});
    }
    staging_ = std::make_unique<device::ParameterStaging>(params, "DiLoCo", stage_cpu);
    const Method method = dist::parse_outer_method(compressor, parse_reducer_kind(reducer));
    py::gil_scoped_release release;  // the constructor's collectives may take a while
    comm_ = std::make_unique<dist::Communicator>(dist::communicator_over(
        group, std::chrono::milliseconds(static_cast<std::int64_t>(timeout_seconds * 1e3))));
    loop_ = std::make_unique<dist::OuterLoop>(staging_->spans(), infos, *comm_, method, options,
                                              staging_->staged() ? staging_.get() : nullptr);
  }

  ~PyOuterLoop() {
    // The exchange thread never takes the GIL, but joining it may wait for a collective.
    py::gil_scoped_release release;
    loop_.reset();
  }

  bool after_inner_step(std::int64_t steps) {
    staging_->check_unchanged();
    py::gil_scoped_release release;
    return loop_->after_inner_step(steps);
  }

  // Copies of every state buffer, by name.
  std::map<std::string, at::Tensor> state() {
    std::vector<StateBuffer> buffers;
    {
      py::gil_scoped_release release;
      buffers = loop_->state();
    }
    std::map<std::string, at::Tensor> out;
    for (const StateBuffer& b : buffers) {
      at::Tensor t = at::empty({static_cast<std::int64_t>(b.data.size())});
      std::copy(b.data.begin(), b.data.end(), t.data_ptr<float>());
      out.emplace(b.name, std::move(t));
    }
    return out;
  }

  // Overwrites every buffer from `saved`, which must name each one with its size, then
  // continues after `steps` inner steps.
  void load_state(const std::map<std::string, at::Tensor>& saved, std::int64_t steps) {
    std::vector<StateBuffer> buffers;
    {
      py::gil_scoped_release release;
      buffers = loop_->state();
    }
    if (saved.size() != buffers.size()) {
      throw InvalidArgument("DiLoCo state: " + std::to_string(saved.size()) + " buffers, this " +
                            "outer loop has " + std::to_string(buffers.size()));
    }
    for (const StateBuffer& b : buffers) {
      const auto it = saved.find(b.name);
      if (it == saved.end()) throw InvalidArgument("DiLoCo state: no buffer " + b.name);
      const at::Tensor t = it->second.to(at::kFloat).contiguous();
      if (static_cast<std::size_t>(t.numel()) != b.data.size()) {
        throw InvalidArgument("DiLoCo state: " + b.name + " has " + std::to_string(t.numel()) +
                              " elements, expected " + std::to_string(b.data.size()));
      }
      std::copy_n(t.data_ptr<float>(), b.data.size(), b.data.begin());
    }
    loop_->resume_at(steps);
  }

  py::dict take_stats() {
    const ReduceStats s = loop_->take_stats();
    return py::dict(
        py::arg("bytes_sent") = s.bytes_sent, py::arg("bytes_received") = s.bytes_received,
        py::arg("encode_seconds") = s.encode_seconds, py::arg("comm_seconds") = s.comm_seconds,
        py::arg("decode_seconds") = s.decode_seconds, py::arg("rounds") = s.steps,
        py::arg("wait_seconds") = loop_->take_wait_seconds());
  }

  void drain() {
    py::gil_scoped_release release;
    loop_->drain();
  }

  void synchronize(std::int64_t steps) {
    staging_->check_unchanged();
    py::gil_scoped_release release;
    loop_->synchronize(steps);
  }

  std::string describe() const { return loop_->describe(); }

 private:
  std::unique_ptr<device::ParameterStaging> staging_;  // the spans the loop reads and writes
  std::unique_ptr<dist::Communicator> comm_;
  std::unique_ptr<dist::OuterLoop> loop_;
};

}  // namespace

void bind_outer_loop(py::module_& m) {
  m.attr("DEFAULT_OUTER_COMPRESSOR") = dist::kDefaultOuterCompressor;
  py::class_<dist::OuterLoopOptions>(m, "OuterLoopOptions")
      .def(py::init<>())
      .def_readwrite("sync_every", &dist::OuterLoopOptions::sync_every)
      .def_readwrite("outer", &dist::OuterLoopOptions::outer)
      .def_readwrite("fragments", &dist::OuterLoopOptions::fragments)
      .def_readwrite("delay", &dist::OuterLoopOptions::delay)
      .def_readwrite("mix", &dist::OuterLoopOptions::mix)
      .def_readwrite("seed", &dist::OuterLoopOptions::seed)
      .def_property(
          "min_elements", [](const dist::OuterLoopOptions& o) { return o.layout.min_elements; },
          [](dist::OuterLoopOptions& o, std::int64_t v) { o.layout.min_elements = v; })
      .def_property(
          "dense_share", [](const dist::OuterLoopOptions& o) { return o.layout.dense_share; },
          [](dist::OuterLoopOptions& o, double v) { o.layout.dense_share = v; });
  py::class_<PyOuterLoop>(m, "OuterLoop",
                          "gradcomp::dist::OuterLoop over a torch.distributed process group")
      .def(py::init<const c10::intrusive_ptr<c10d::ProcessGroup>&,
                    const std::vector<std::pair<std::string, at::Tensor>>&, const std::string&,
                    const std::string&, const dist::OuterLoopOptions&, double, bool>(),
           py::arg("group"), py::arg("params"), py::arg("compressor"), py::arg("reducer"),
           py::arg("options"), py::arg("timeout_seconds"), py::arg("stage_cpu") = false)
      .def("after_inner_step", &PyOuterLoop::after_inner_step, py::arg("steps"))
      .def("state", &PyOuterLoop::state)
      .def("load_state", &PyOuterLoop::load_state, py::arg("saved"), py::arg("steps"))
      .def("take_stats", &PyOuterLoop::take_stats)
      .def("drain", &PyOuterLoop::drain)
      .def("synchronize", &PyOuterLoop::synchronize, py::arg("steps"))
      .def("describe", &PyOuterLoop::describe);
  m.def(
      "check_outer_loop",
      [](const std::string& compressor, const std::string& reducer,
         const dist::OuterLoopOptions& options) {
        dist::OuterLoop::check(dist::parse_outer_method(compressor, parse_reducer_kind(reducer)),
                               options);
      },
      py::arg("compressor"), py::arg("reducer"), py::arg("options"),
      "ValueError when the compressor or the options cannot run (before any collective)");
}

}  // namespace gradcomp::python
