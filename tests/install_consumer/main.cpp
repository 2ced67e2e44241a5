#include <gpumem/gpumem.h>

#include <cstdio>
#include <gpumem/gpumem.hpp>
#include <gpumem/sync.hpp>
#include <mutex>

// Never called: it makes the program use the inline Lock::lock() and unlock(), so that it
// needs libgpumem's GPUMEM_0.2 node (package_test.sh checks that it asks for it).
void take_and_release(gpumem::Lock& lock) {
  std::scoped_lock hold(lock);
}

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
