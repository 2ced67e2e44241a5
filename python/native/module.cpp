// gpumem._gpumem: the native half of the gpumem package; gpumem/__init__.py is the other.
#include <pybind11/pybind11.h>

#include "buffer.hpp"
#include "client.hpp"
#include "errors.hpp"
#include "gpumem/gpumem.hpp"
#include "reservation.hpp"
#include "signal_waits.hpp"
#include "sync.hpp"

PYBIND11_MODULE(_gpumem, module) {
  module.doc() = "gpumem's native module: the C++ client library of gpumemd, bound with pybind11.";
  module.attr("__version__") = GPUMEM_VERSION;
  module.attr("HOST") = gpumem::kHost;
  gpumem::python::bind_errors(module);
  gpumem::python::bind_buffer(module);
  gpumem::python::bind_sync(module);
  gpumem::python::bind_reservation(module);
  gpumem::python::bind_client(module);
  gpumem::python::remember_the_main_thread();
}
