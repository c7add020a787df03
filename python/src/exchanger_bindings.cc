// gradcomp._C.Exchanger: gradcomp::dist::Exchanger over a torch.distributed process
// group, with completions delivered to Python callables (gradcomp.torch completes the
// DDP hook's futures from them). The layout rule shared with the CLI trainer
// (gradcomp/layout.h) is exposed as dense_tensors().
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <c10/core/Stream.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "gradcomp/config_agreement.h"
#include "gradcomp/device/groups.h"
#include "gradcomp/device/reducer.h"
#include "gradcomp/dist/config_check.h"
#include "gradcomp/dist/exchanger.h"
#include "gradcomp/dist/process_group.h"
#include "gradcomp/dist/schemes.h"
#include "gradcomp/error.h"
#include "gradcomp/layout.h"
#include "gradcomp/method.h"

namespace py = pybind11;

namespace gradcomp::python {

namespace {

// A Python callable that may be called and released on the exchange thread: both take
// the GIL there. It is called with None, or with the exception the job failed with as
// a Python exception object (gradcomp.CommError, ValueError, ...: python_exception()).
class PyCallback {
 public:
  explicit PyCallback(py::function f) : f_(std::move(f)) {}
  ~PyCallback() {
    py::gil_scoped_acquire gil;
    f_ = py::function();
  }
  void operator()(std::exception_ptr error) const {
    py::gil_scoped_acquire gil;
    try {
      f_(error ? python_exception(error) : py::none());
    } catch (py::error_already_set& e) {
      // Nobody above this thread could catch it: report it as Python reports errors in
      // callbacks it cannot propagate (and the future it should have completed stays
      // pending, which the caller's timeout then reports).
      e.discard_as_unraisable("gradcomp exchange completion");
    }
  }

 private:
  py::function f_;
};

// A job's Ready (dist::Exchanger): a Python callable with no arguments, called on the
// exchange thread under the GIL (gradcomp.torch waits there for a CUDA bucket's copy to
// the host; the wait releases the GIL). What it raises fails the job with its message.
dist::Exchanger::Ready ready_of(const py::object& ready) {
  if (ready.is_none()) return {};
  auto f = std::shared_ptr<py::object>(new py::object(ready), [](py::object* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
  return [f] {
    py::gil_scoped_acquire gil;
    try {
      (*f)();
    } catch (py::error_already_set& e) {
      throw std::runtime_error(std::string("gradcomp: staging the bucket failed: ") + e.what());
    }
  };
}

// (id, offset, numel, rows, compressible) of one tensor inside a group's flat buffer.
using Slot = std::tuple<std::uint32_t, std::size_t, std::size_t, std::size_t, bool>;

std::vector<device::Groups::Slot> device_slots(const std::vector<Slot>& slots) {
  std::vector<device::Groups::Slot> out;
  out.reserve(slots.size());
  for (const auto& [id, offset, numel, rows, compressible] : slots) {
    out.push_back({{id, numel, compressible, rows}, offset});
  }
  return out;
}

std::vector<BucketShape> shapes_of(const std::vector<Slot>& slots) {
  std::vector<BucketShape> out;
  out.reserve(slots.size());
  for (const auto& [id, offset, numel, rows, compressible] : slots) {
    (void)offset;
    out.push_back({id, numel, compressible, rows});
  }
  return out;
}

// (name, value) pairs that every rank must hold alike (gradcomp/config_agreement.h).
using Fields = std::vector<std::pair<std::string, std::string>>;

class PyExchanger {
 public:
  // The ranks agree on `fields` (the caller's configuration, as given) before anything
  // is validated or built: a rank whose own check would fail must not leave the others
  // waiting in a collective it never joins, and ranks that differ must all fail alike.
  PyExchanger(const c10::intrusive_ptr<c10d::ProcessGroup>& group, const std::string& spec,
              const std::string& reducer, double timeout_seconds, const Fields& fields)
      : comm_(std::make_unique<dist::Communicator>(dist::communicator_over(
            group, std::chrono::milliseconds(static_cast<std::int64_t>(timeout_seconds * 1e3))))),
        exchanger_(agreed_exchanger(*comm_, fields, spec, reducer)) {}

  // The exchange thread takes the GIL to run completions: never wait for it, or destroy
  // it, while holding the GIL.
  ~PyExchanger() {
    if (PyGILState_Check()) {
      py::gil_scoped_release release;
      exchanger_.reset();
    } else {
      exchanger_.reset();
    }
  }

  void submit(std::uint64_t key, const at::Tensor& buffer, const std::vector<Slot>& slots,
              bool compress, const StepContext& ctx, const py::function& done,
              const py::object& ready) {
    const std::span<float> data = float_span(buffer, "gradcomp exchange");
    std::vector<BucketRef> refs;
    refs.reserve(slots.size());
    for (const auto& [id, offset, numel, rows, compressible] : slots) {
      (void)rows;
      if (offset > data.size() || numel > data.size() - offset) {
        throw InvalidArgument("gradcomp exchange: tensor " + std::to_string(id) + " at " +
                              std::to_string(offset) + " + " + std::to_string(numel) +
                              " outside a bucket of " + std::to_string(data.size()));
      }
      refs.push_back({id, data.subspan(offset, numel), compress && compressible});
    }
    exchanger_->submit(key, shapes_of(slots), std::move(refs), ctx, completion(buffer, done),
                       ready_of(ready));
  }

  void submit_dense(const at::Tensor& buffer, const StepContext& ctx, const py::function& done,
                    const py::object& ready) {
    exchanger_->submit_dense(float_span(buffer, "gradcomp exchange"), ctx, completion(buffer, done),
                             dist::Exchanger::DenseInput::kGradients, ready_of(ready));
  }

  // Whether the compressor runs on the gradients' device (gradcomp/device/reducer.h: an
  // allgather of a device codec, or powersgd); otherwise device buckets are staged through
  // host memory and exchanged by submit().
  bool device_supported() const { return device::Reducer::supports(exchanger_->method()); }

  // Queues the exchange of one group whose buffer lives on a device (or, for tests, on the
  // CPU): the device reducer compresses it there and only what the collectives carry
  // (messages, PowerSGD's factors, the dense buckets) reaches the host.
  // `stream`: (stream_id, device_index, device_type) of the stream the device work runs
  // on, already ordered after the gradients' production; None on the CPU.
  void submit_device(std::uint64_t key, const at::Tensor& buffer, const std::vector<Slot>& slots,
                     bool compress, const StepContext& ctx, const py::function& done,
                     const py::object& stream) {
    device::Groups::Hooks hooks;
    if (!stream.is_none()) {
      const auto [id, index, type] = stream.cast<std::tuple<std::int64_t, int, int>>();
      hooks.stream = c10::Stream(
          c10::Stream::UNSAFE,
          c10::Device(static_cast<c10::DeviceType>(type), static_cast<c10::DeviceIndex>(index)),
          static_cast<c10::StreamId>(id));
    }
    device_groups_.submit(key, buffer, device_slots(slots), compress, ctx, completion(buffer, done),
                          std::move(hooks));
  }

  py::dict take_stats() {
    const ReduceStats s = exchanger_->take_stats();
    return py::dict(
        py::arg("bytes_sent") = s.bytes_sent, py::arg("bytes_received") = s.bytes_received,
        py::arg("encode_seconds") = s.encode_seconds, py::arg("comm_seconds") = s.comm_seconds,
        py::arg("decode_seconds") = s.decode_seconds, py::arg("steps") = s.steps,
        py::arg("dense_fallbacks") = s.dense_fallbacks,
        py::arg("non_finite_skips") = s.non_finite_skips);
  }

  // Copies of the group's memory state, in the reducer's fixed order.
  std::vector<std::pair<std::string, at::Tensor>> state(std::uint64_t key) {
    std::vector<std::pair<std::string, at::Tensor>> out;
    if (device_groups_.has(key)) {
      for (const auto& [name, t] : device_groups_.state(key)) {
        out.emplace_back(name, t.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true));
      }
      return out;
    }
    for (const StateBuffer& b : exchanger_->state(key)) {
      at::Tensor t = at::empty({static_cast<std::int64_t>(b.data.size())});
      std::copy(b.data.begin(), b.data.end(), t.data_ptr<float>());
      out.emplace_back(b.name, std::move(t));
    }
    return out;
  }

  // Builds the group (if needed) and overwrites the named buffers of its state with
  // `saved` ("bucket<id>.<name>" -> values); every saved name must exist with its size.
  void restore(std::uint64_t key, const std::vector<Slot>& slots,
               const std::map<std::string, at::Tensor>& saved, const py::object& device) {
    if (!device.is_none()) {
      device_groups_.restore(key, device_slots(slots), device.cast<at::Device>(), saved);
      return;
    }
    exchanger_->prepare(key, shapes_of(slots));
    std::map<std::string, std::span<float>> live;
    for (const StateBuffer& b : exchanger_->state(key)) live.emplace(b.name, b.data);
    for (const auto& [name, tensor] : saved) {
      const auto it = live.find(name);
      const at::Tensor t = tensor.contiguous();
      const std::span<float> src = float_span(t, "gradcomp state");
      if (it == live.end() || it->second.size() != src.size()) {
        throw InvalidArgument(
            "gradcomp state: the checkpoint's " + name + " (" + std::to_string(src.size()) +
            " values) has no counterpart in " + exchanger_->describe() +
            (it == live.end() ? "" : " of " + std::to_string(it->second.size()) + " values") +
            " (was it saved with another compressor or model?)");
      }
      std::copy(src.begin(), src.end(), it->second.begin());
    }
  }

  void drop(std::uint64_t key) {
    py::gil_scoped_release release;
    exchanger_->drain();
    exchanger_->drop(key);
    device_groups_.drop(key);
  }

  bool has_group(std::uint64_t key) const {
    return exchanger_->has_group(key) || device_groups_.has(key);
  }

  void drain() {
    py::gil_scoped_release release;
    exchanger_->drain();
  }

  // One allgather of `fields` on this thread; ValueError, on every rank alike, naming
  // the first field that differs and both values. Collective: every rank calls it at the
  // same point, and only when no job is queued (the exchange thread issues the group's
  // other collectives; it is drained first, so nothing interleaves).
  void agree(const Fields& fields) {
    {
      py::gil_scoped_release release;
      exchanger_->drain();
    }
    agree_on(*comm_, fields);
  }

  const dist::Exchanger& exchanger() const { return *exchanger_; }
  dist::Exchanger& exchanger() { return *exchanger_; }
  int rank() const { return comm_->rank(); }
  int world_size() const { return comm_->world_size(); }

 private:
  // The agreement itself (dist/config_check.h), without the GIL: it waits for the peers.
  static void agree_on(dist::Communicator& comm, const Fields& fields) {
    ConfigFields mine;
    for (const auto& [name, value] : fields) mine.push_back({name, value});
    py::gil_scoped_release release;
    try {
      dist::check_ranks_agree(comm, mine);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string("gradcomp: ") + e.what());
    }
  }

  // The exchanger, built once the ranks agree on `fields` (it validates spec and reducer).
  static std::unique_ptr<dist::Exchanger> agreed_exchanger(dist::Communicator& comm,
                                                           const Fields& fields,
                                                           const std::string& spec,
                                                           const std::string& reducer) {
    agree_on(comm, fields);
    return std::make_unique<dist::Exchanger>(comm, spec, dist::parse_reducer_kind(reducer));
  }

  // The buffer stays alive (and the callable reachable) until the job has completed.
  static dist::Exchanger::Done completion(const at::Tensor& buffer, const py::function& done) {
    auto callback = std::make_shared<PyCallback>(done);
    return [callback, buffer](std::exception_ptr error) { (*callback)(error); };
  }

  std::unique_ptr<dist::Communicator> comm_;
  std::unique_ptr<dist::Exchanger> exchanger_;
  // Groups whose buckets live on a device (submit_device, gradcomp/device/groups.h).
  device::Groups device_groups_{*exchanger_, *comm_};
};

// Completes a torch future with `error` as its exception, so that waiting for it
// (Future.wait(), or DDP's reducer at the end of loss.backward()) raises that very
// Python exception. Future.set_exception() cannot serve a DDP hook: it completes the
// future with the exception as its value, which DDP then fails to read as a tensor.
// torch rethrows a python_error as the Python exception it carries.
void fail_future(const std::shared_ptr<torch::jit::PythonFutureWrapper>& future,
                 const py::object& error) {
  if (!PyExceptionInstance_Check(error.ptr())) {
    throw py::type_error("fail_future: expected an exception instance");
  }
  python_error carried;
  carried.type = py::type::handle_of(error).inc_ref().ptr();
  carried.value = error.inc_ref().ptr();
  carried.traceback = PyException_GetTraceback(error.ptr());  // a new reference, or null
  carried.build_message();
  std::exception_ptr eptr = std::make_exception_ptr(std::move(carried));
  // The future's callbacks may take the GIL.
  py::gil_scoped_release release;
  future->fut->setError(std::move(eptr));
}

// Which of the model's tensors stay dense under the CLI's layout rules.
std::vector<bool> dense_tensors(
    const std::vector<std::tuple<std::string, std::int64_t, std::int64_t, std::int64_t>>& params,
    std::int64_t min_elements, double dense_share) {
  std::vector<ParamInfo> infos;
  for (const auto& [name, numel, dim, rows] : params) infos.push_back({name, numel, dim, rows});
  LayoutOptions options;
  options.min_elements = min_elements;
  options.dense_share = dense_share;
  std::vector<bool> dense(infos.size(), false);
  for (const BucketPlan& b : plan_buckets(infos, options)) {
    if (b.compressible) continue;
    for (const BucketPlan::Slot& s : b.slots) dense[s.param] = true;
  }
  return dense;
}

}  // namespace

void bind_exchanger(py::module_& m) {
  py::class_<StepContext>(m, "StepContext")
      .def(py::init<>())
      .def_readwrite("seed", &StepContext::seed)
      .def_readwrite("step", &StepContext::step)
      .def_readwrite("steps_per_epoch", &StepContext::steps_per_epoch)
      .def_readwrite("total_steps", &StepContext::total_steps)
      .def_readwrite("lr", &StepContext::lr)
      .def_readwrite("momentum", &StepContext::momentum)
      .def_readwrite("nesterov", &StepContext::nesterov);

  py::class_<PyExchanger>(m, "Exchanger",
                          "gradcomp::dist::Exchanger over a torch.distributed process group "
                          "(used by gradcomp.torch; see its docs).")
      .def(py::init<const c10::intrusive_ptr<c10d::ProcessGroup>&, const std::string&,
                    const std::string&, double, const Fields&>(),
           py::arg("process_group"), py::arg("spec"), py::arg("reducer") = "auto",
           py::arg("timeout_seconds") = 1800.0, py::arg("agree") = Fields{},
           "Collective: the ranks first agree on `agree`'s (name, value) pairs "
           "(ValueError on every rank naming the first difference).")
      .def("submit", &PyExchanger::submit, py::arg("key"), py::arg("buffer"), py::arg("slots"),
           py::arg("compress"), py::arg("ctx"), py::arg("done"), py::arg("ready") = py::none())
      .def("submit_dense", &PyExchanger::submit_dense, py::arg("buffer"), py::arg("ctx"),
           py::arg("done"), py::arg("ready") = py::none())
      .def("drain", &PyExchanger::drain)
      .def("agree", &PyExchanger::agree, py::arg("fields"),
           "Collective, on this thread once the queue is drained: ValueError on every rank "
           "naming the first (name, value) pair that differs.")
      .def("take_stats", &PyExchanger::take_stats)
      .def("state", &PyExchanger::state, py::arg("key"))
      .def("restore", &PyExchanger::restore, py::arg("key"), py::arg("slots"), py::arg("saved"),
           py::arg("device") = py::none())
      .def("submit_device", &PyExchanger::submit_device, py::arg("key"), py::arg("buffer"),
           py::arg("slots"), py::arg("compress"), py::arg("ctx"), py::arg("done"),
           py::arg("stream") = py::none())
      .def_property_readonly("device_supported", &PyExchanger::device_supported)
      .def("drop", &PyExchanger::drop, py::arg("key"))
      .def("has_group", &PyExchanger::has_group)
      .def_property_readonly(
          "momentum_in_memory",
          [](const PyExchanger& e) { return e.exchanger().momentum_in_memory(); })
      .def(
          "use_momentum",
          [](PyExchanger& e, double momentum, bool nesterov) {
            e.exchanger().use_momentum(momentum, nesterov);
          },
          py::arg("momentum"), py::arg("nesterov") = false,
          "A bare biased codec gets efm(...) when momentum > 0 (before the first step).")
      .def_property(
          "skip_non_finite",
          [](const PyExchanger& e) {
            return e.exchanger().non_finite() == dist::Exchanger::NonFinite::kSkipStep;
          },
          [](PyExchanger& e, bool skip) {
            e.exchanger().set_non_finite(skip ? dist::Exchanger::NonFinite::kSkipStep
                                              : dist::Exchanger::NonFinite::kRaise);
          },
          "A compressed group holding NaN or an infinity on any rank becomes +inf on every "
          "rank, memories untouched (dist::Exchanger::NonFinite::kSkipStep), rather than "
          "failing. Before the first submission.")
      .def_property_readonly("dense_only",
                             [](const PyExchanger& e) { return e.exchanger().dense_only(); })
      .def_property_readonly("compressor",
                             [](const PyExchanger& e) { return e.exchanger().compressor(); })
      .def_property_readonly("describe",
                             [](const PyExchanger& e) { return e.exchanger().describe(); })
      .def_property_readonly("rank", &PyExchanger::rank)
      .def_property_readonly("world_size", &PyExchanger::world_size);

  m.def("fail_future", &fail_future, py::arg("future"), py::arg("error"),
        "Completes a torch.futures.Future with `error` (an exception instance), so that "
        "waiting for it raises that exception (also inside DDP's backward).");
  m.def("dense_tensors", &dense_tensors, py::arg("params"), py::arg("min_elements"),
        py::arg("dense_share"),
        "For (name, numel, dim, rows) tuples in model order: which tensors stay dense under\n"
        "gradcomp's layout rules (dim <= 1, numel < min_elements, the smallest within\n"
        "dense_share of the model).");
  // Method::schedule / start_warnings / threshold_warning (gradcomp/method.h): what
  // gradcomp.torch tells the user at the start of a run.
  m.def(
      "schedule",
      [](const std::string& spec, std::uint64_t steps_per_epoch, std::uint64_t total_steps) {
        return Method::parse(spec).schedule({steps_per_epoch, total_steps, {}});
      },
      py::arg("spec"), py::arg("steps_per_epoch"), py::arg("total_steps"),
      "The compressor's effective schedule in this run (DGC's warm-up), one line; '' if none.");
  m.def(
      "start_warnings",
      [](const std::string& spec, std::uint64_t steps_per_epoch, std::uint64_t total_steps,
         std::vector<std::size_t> compressed_sizes) {
        return Method::parse(spec).start_warnings(
            {steps_per_epoch, total_steps, std::move(compressed_sizes)});
      },
      py::arg("spec"), py::arg("steps_per_epoch"), py::arg("total_steps"),
      py::arg("compressed_sizes"),
      "One line per setting of the spec that cannot do what was asked in this run.");
  m.def(
      "fixed_2bit_threshold",
      [](const std::string& spec) { return Method::parse(spec).fixed_threshold(); },
      py::arg("spec"), "The spec's fixed 2-bit threshold; 0 when it has none.");
  m.def(
      "threshold_warning",
      [](const std::string& spec, const std::vector<torch::Tensor>& grads,
         std::uint64_t step) -> std::optional<std::string> {
        std::vector<torch::Tensor> flat;
        std::vector<std::span<const float>> spans;
        for (const torch::Tensor& g : grads) {
          flat.push_back(g.detach().to(torch::kFloat).contiguous().cpu());
          spans.emplace_back(flat.back().data_ptr<float>(),
                             static_cast<std::size_t>(flat.back().numel()));
        }
        return Method::parse(spec).threshold_warning(spans, step);
      },
      py::arg("spec"), py::arg("grads"), py::arg("step"),
      "A warning when the spec's fixed 2-bit threshold is far above these gradients' scale.");
  m.def(
      "validate_spec",
      [](const std::string& spec, const std::string& reducer) {
        (void)Method::parse(spec, {.reducer = dist::parse_reducer_kind(reducer)});
      },
      py::arg("spec"), py::arg("reducer") = "auto",
      "Raises ValueError for a bad compressor spec, or one the reducer cannot run (the "
      "exchanger's own check).");
}

}  // namespace gradcomp::python
