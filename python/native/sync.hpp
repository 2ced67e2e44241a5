#pragma once
/// @file
/// @brief gpumem.Lock, gpumem.Barrier and gpumem.Channel over their C++ namesakes. Every
/// `stream=` is None for the host form (which waits with the GIL let go) or a stream for the
/// stream-ordered form (which queues the wait and returns).

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>

#include "gil.hpp"
#include "gpumem/gpumem.hpp"

namespace gpumem::python {

using held_lock = gil_free_ptr<Lock>;
using held_barrier = gil_free_ptr<Barrier>;
using held_channel = std::shared_ptr<Channel>;  // shared: its slots' Buffer keeps it alive

held_lock make_lock(Client& client, const std::string& name, Mode mode);
held_barrier make_barrier(Client& client, const std::string& name, std::uint32_t parties,
                          Mode mode);
held_channel make_channel(Client& client, const std::string& name, ChannelRole role,
                          const ChannelOptions& options);

void bind_sync(pybind11::module_& module);

}  // namespace gpumem::python
