#include <gpumem/gpumem.h>

#include <cstdio>
#include <gpumem/gpumem.hpp>

int main() {
  try {
    gpumem::Client::connect({.socket_path = "/nonexistent/gpumemd.sock"});
  } catch (const gpumem::Error& error) {
    if (error.status() != gpumem::errc::io_error) return 1;
  }
  gpumem_client* client = nullptr;
  if (gpumem_connect("/nonexistent/gpumemd.sock", &client) != GPUMEM_IO_ERROR) return 2;
  std::printf("installed gpumem works: %s\n", gpumem_status_string(GPUMEM_OK));
  return 0;
}
