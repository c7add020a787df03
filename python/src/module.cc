// gradcomp._C: the Python extension over the same codec core and exchange as the CLI.
// gradcomp's exceptions become Python ones: a caller's mistake (bad spec, wrong size)
// and a corrupt message are ValueError, a failed peer is gradcomp.CommError (a
// RuntimeError), so that no C++ exception ever reaches the interpreter untranslated.
#include "bindings.h"

#include <string>
#include <utility>

#include "gradcomp/error.h"

namespace py = pybind11;

namespace gradcomp::python {

namespace {

PyObject* comm_error_type = nullptr;  // gradcomp.CommError, set when the module loads

// The Python type of one of gradcomp's exceptions and its message; a null type for an
// exception that is not gradcomp's (left to pybind11's and torch's own translations).
std::pair<PyObject*, std::string> classify(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const CommError& e) {
    return {comm_error_type, e.what()};
  } catch (const InvalidArgument& e) {
    return {PyExc_ValueError, e.what()};
  } catch (const CorruptMessage& e) {
    return {PyExc_ValueError, e.what()};
  } catch (const std::exception& e) {
    return {nullptr, e.what()};
  } catch (...) {
    return {nullptr, "unknown error"};
  }
}

// A message as Python text, whole: a message may quote what it was given (a spec's bytes),
// cut mid-character or with a NUL in it. PyErr_SetString would raise UnicodeDecodeError
// instead of the error, or stop at the NUL; the bytes that are not UTF-8 read as U+FFFD.
py::str message_text(const std::string& message) {
  return py::reinterpret_steal<py::str>(
      PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "replace"));
}

// The module's exception translator (pybind11 tries the next one on a rethrow).
void translate(std::exception_ptr error) {
  if (!error) return;
  const auto [type, message] = classify(error);
  if (type == nullptr) std::rethrow_exception(error);
  PyErr_SetObject(type, message_text(message).ptr());
}

}  // namespace

py::object python_exception(const std::exception_ptr& error) {
  const auto [type, message] = classify(error);
  return py::reinterpret_borrow<py::object>(type ? type
                                                 : PyExc_RuntimeError)(message_text(message));
}

StepContext codec_call_context(const at::Tensor& t, std::uint64_t seed, std::uint64_t step,
                               std::uint32_t rank, std::uint32_t bucket) {
  StepContext ctx;
  ctx.seed = seed;
  ctx.step = step;
  ctx.rank = rank;
  ctx.bucket = bucket;
  ctx.rows = t.dim() >= 2 ? static_cast<std::uint32_t>(t.size(0)) : 0;
  return ctx;
}

std::span<float> float_span(const at::Tensor& t, const char* what) {
  if (!t.device().is_cpu() || t.scalar_type() != at::kFloat || !t.is_contiguous()) {
    throw InvalidArgument(std::string(what) + ": expected a contiguous CPU float32 tensor, got " +
                          std::string(c10::toString(t.scalar_type())) + " on " + t.device().str() +
                          (t.is_contiguous() ? "" : " (not contiguous)"));
  }
  return {t.data_ptr<float>(), static_cast<std::size_t>(t.numel())};
}

}  // namespace gradcomp::python

PYBIND11_MODULE(_C, m) {
  m.doc() = "gradcomp's C++ core: codecs and the asynchronous gradient exchange";
  static py::exception<gradcomp::CommError> comm_error(m, "CommError", PyExc_RuntimeError);
  gradcomp::python::comm_error_type = comm_error.ptr();
  py::register_exception_translator(&gradcomp::python::translate);
  gradcomp::python::bind_codecs(m);
  gradcomp::python::bind_device_codecs(m);
  gradcomp::python::bind_exchanger(m);
  gradcomp::python::bind_outer_loop(m);
}
