/* Read by tests/CMakeLists.txt with `cc -dM -E` for the table of system call numbers. */
#include <sys/syscall.h>
