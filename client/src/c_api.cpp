#include <string>

#include "gpumem/gpumem.h"
#include "gpumem/gpumem.hpp"

struct gpumem_client {
  gpumem::Client client;
};
struct gpumem_buffer {
  gpumem::Buffer buffer;
};

namespace {
thread_local std::string last_error;

static_assert(GPUMEM_SESSION_LOST == static_cast<int>(gpumem::errc::session_lost),
              "gpumem.h and the protocol's status table disagree");

template <class Work>
gpumem_status guarded(Work&& work) noexcept {
  try {
    work();
    last_error.clear();
    return GPUMEM_OK;
  } catch (const gpumem::Error& error) {
    last_error = error.what();
    return static_cast<gpumem_status>(error.status());
  } catch (const std::bad_alloc&) {
    last_error = "out of host memory";
    return GPUMEM_INTERNAL;
  } catch (const std::exception& error) {
    last_error = error.what();
    return GPUMEM_INTERNAL;
  }
}

gpumem_status refuse_null(const char* what) noexcept {
  last_error = std::string(what) + " is NULL";
  return GPUMEM_INVALID_ARGUMENT;
}
}  // namespace

extern "C" {

gpumem_status gpumem_connect(const char* socket_path, gpumem_client** client) {
  if (client == nullptr) return refuse_null("client");
  return guarded([&] {
    gpumem::ConnectOptions options;
    if (socket_path != nullptr) options.socket_path = socket_path;
    *client = new gpumem_client{gpumem::Client::connect(options)};
  });
}

gpumem_status gpumem_connect_with(const gpumem_connect_options* options, gpumem_client** client) {
  if (client == nullptr) return refuse_null("client");
  return guarded([&] {
    gpumem::ConnectOptions chosen;
    if (options != nullptr) {
      if (options->socket_path != nullptr) chosen.socket_path = options->socket_path;
      if (options->label != nullptr) chosen.label = options->label;
      chosen.timeout = std::chrono::milliseconds(options->timeout_ms);
      if (options->has_daemon_uid) chosen.daemon_uid = options->daemon_uid;
      if (options->has_reconnect_ms) {
        chosen.reconnect_for = std::chrono::milliseconds(options->reconnect_ms);
      }
    }
    *client = new gpumem_client{gpumem::Client::connect(chosen)};
  });
}

void gpumem_disconnect(gpumem_client* client) {
  delete client;
}

gpumem_status gpumem_allocate(gpumem_client* client, size_t bytes, int device, const char* name,
                              gpumem_buffer** buffer) {
  if (client == nullptr || buffer == nullptr) return refuse_null("client or buffer");
  return guarded([&] {
    gpumem::AllocateOptions options;
    options.device = device;
    if (name != nullptr) options.name = name;
    *buffer = new gpumem_buffer{client->client.allocate(bytes, options)};
  });
}

gpumem_status gpumem_open(gpumem_client* client, const char* name, int read_only,
                          gpumem_buffer** buffer) {
  if (client == nullptr || buffer == nullptr || name == nullptr) {
    return refuse_null("client, name or buffer");
  }
  return guarded([&] {
    gpumem::OpenOptions options;
    options.access = read_only ? gpumem::Access::read_only : gpumem::Access::read_write;
    *buffer = new gpumem_buffer{client->client.open(name, options)};
  });
}

gpumem_status gpumem_release(gpumem_buffer* buffer) {
  if (buffer == nullptr) return GPUMEM_OK;
  const gpumem_status status = guarded([&] { buffer->buffer.release(); });
  delete buffer;
  return status;
}

void* gpumem_buffer_data(const gpumem_buffer* buffer) {
  return buffer != nullptr ? buffer->buffer.data() : nullptr;
}

size_t gpumem_buffer_size(const gpumem_buffer* buffer) {
  return buffer != nullptr ? buffer->buffer.size() : 0;
}

uint64_t gpumem_buffer_id(const gpumem_buffer* buffer) {
  return buffer != nullptr ? buffer->buffer.id() : 0;
}

const char* gpumem_last_error(void) {
  return last_error.c_str();
}

const char* gpumem_status_string(int status) {
  if (status < 0 || !gpumem::proto::is_known_errc(static_cast<std::uint32_t>(status))) {
    return "unknown gpumem status";
  }
  return gpumem::proto::describe(static_cast<gpumem::errc>(status)).data();
}
}
