/**
 * @file
 * @brief GPUMEM_API marks what libgpumem.so exports: the C API, the public C++ classes and
 * functions, and the status category of the protocol they throw. libgpumem is built with
 * -fvisibility=hidden, so everything else (the protocol's codec, the shared pages, the CUDA
 * driver table, the client's internals) stays inside it, and client/libgpumem.map gives what is
 * exported the version node GPUMEM_0. The same attribute serves the library's build and its
 * consumers: ELF needs no import marking. In proto/, the lowest layer, as proto's own public
 * header (gpumem/proto/errc.hpp) needs it too.
 */
#ifndef GPUMEM_EXPORT_H
#define GPUMEM_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define GPUMEM_API __attribute__((visibility("default")))
#else
#define GPUMEM_API
#endif

#endif /* GPUMEM_EXPORT_H */
