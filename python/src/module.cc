// gradcomp._C: the Python extension over the same codec core and exchange as the CLI.
// gradcomp's exceptions become Python ones: a caller's mistake (bad spec, wrong size)
// and a corrupt message are ValueError, a failed peer is gradcomp.CommError (a
// RuntimeError), so that no C++ exception ever reaches the interpreter untranslated.
#include "bindings.h"
#include "gradcomp/error.h"

namespace py = pybind11;

namespace gradcomp::python {

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
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const gradcomp::CommError& e) {
      comm_error(e.what());
    } catch (const gradcomp::InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const gradcomp::CorruptMessage& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  gradcomp::python::bind_codecs(m);
  gradcomp::python::bind_exchanger(m);
}
