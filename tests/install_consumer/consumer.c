/* A C program against an installed gpumem, linked by pkg-config's flags: with `--static`
 * against libgpumem.a alone (Libs.private must name everything the C++ inside needs), or
 * against libgpumem.so. With no argument it checks a failed connection; given a daemon's
 * socket, it allocates and releases a host buffer through that daemon. */
#include <gpumem/gpumem.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  gpumem_client* client = NULL;
  if (argc < 2) {
    if (gpumem_connect("/nonexistent/gpumemd.sock", &client) != GPUMEM_IO_ERROR) return 1;
    printf("C consumer: %s\n", gpumem_status_string(GPUMEM_IO_ERROR));
    return 0;
  }
  if (gpumem_connect(argv[1], &client) != GPUMEM_OK) {
    fprintf(stderr, "connect: %s\n", gpumem_last_error());
    return 2;
  }
  gpumem_buffer* buffer = NULL;
  if (gpumem_allocate(client, 4096, GPUMEM_HOST, "package-test", &buffer) != GPUMEM_OK) {
    fprintf(stderr, "allocate: %s\n", gpumem_last_error());
    return 3;
  }
  memset(gpumem_buffer_data(buffer), 7, gpumem_buffer_size(buffer));
  if (gpumem_release(buffer) != GPUMEM_OK) return 4;
  gpumem_disconnect(client);
  printf("C consumer: allocated and released a buffer through %s\n", argv[1]);
  return 0;
}
