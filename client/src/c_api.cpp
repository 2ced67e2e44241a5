#include <string>

#include "gpumem/gpumem.h"
#include "gpumem/gpumem.hpp"
#include "gpumem/reservation.hpp"

struct gpumem_client {
  gpumem::Client client;
};
struct gpumem_buffer {
  gpumem::Buffer buffer;
};
struct gpumem_reservation {
  gpumem::Reservation reservation;
};
struct gpumem_reservation_draft {
  gpumem::ReservationDraft draft;
};

namespace {
thread_local std::string last_error;

static_assert(GPUMEM_WRONG_STATE == static_cast<int>(gpumem::errc::wrong_state),
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

gpumem_status gpumem_open_own_objects_only(gpumem_client* client, int only) {
  if (client == nullptr) return refuse_null("client");
  return guarded([&] { client->client.open_own_objects_only(only != 0); });
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

gpumem_status gpumem_reserve(gpumem_client* client, size_t max_bytes, size_t initial, int device,
                             const char* name, gpumem_reservation** reservation) {
  if (client == nullptr || reservation == nullptr) return refuse_null("client or reservation");
  return guarded([&] {
    gpumem::ReserveOptions options;
    options.device = device;
    options.initial = initial;
    if (name != nullptr) options.name = name;
    *reservation =
        new gpumem_reservation{gpumem::Reservation::create(client->client, max_bytes, options)};
  });
}

gpumem_status gpumem_open_reservation(gpumem_client* client, const char* name, int read_only,
                                      gpumem_reservation** reservation) {
  if (client == nullptr || reservation == nullptr || name == nullptr) {
    return refuse_null("client, name or reservation");
  }
  return guarded([&] {
    gpumem::OpenReservationOptions options;
    options.access = read_only ? gpumem::Access::read_only : gpumem::Access::read_write;
    *reservation = new gpumem_reservation{gpumem::Reservation::open(client->client, name, options)};
  });
}

gpumem_status gpumem_release_reservation(gpumem_reservation* reservation) {
  if (reservation == nullptr) return GPUMEM_OK;
  const gpumem_status status = guarded([&] { reservation->reservation.release(); });
  delete reservation;
  return status;
}

void* gpumem_reservation_data(const gpumem_reservation* reservation) {
  return reservation != nullptr ? reservation->reservation.data() : nullptr;
}

size_t gpumem_reservation_size(const gpumem_reservation* reservation) {
  return reservation != nullptr ? reservation->reservation.size() : 0;
}

uint64_t gpumem_reservation_version(const gpumem_reservation* reservation) {
  return reservation != nullptr ? reservation->reservation.version() : 0;
}

uint64_t gpumem_reservation_id(const gpumem_reservation* reservation) {
  return reservation != nullptr ? reservation->reservation.id() : 0;
}

gpumem_status gpumem_resize_reservation(gpumem_reservation* reservation, size_t bytes) {
  if (reservation == nullptr) return refuse_null("reservation");
  return guarded([&] { reservation->reservation.resize(bytes); });
}

gpumem_status gpumem_refresh(gpumem_reservation* reservation, size_t* size) {
  if (reservation == nullptr) return refuse_null("reservation");
  return guarded([&] {
    const std::size_t mapped = reservation->reservation.refresh();
    if (size != nullptr) *size = mapped;
  });
}

gpumem_status gpumem_wait_version(gpumem_reservation* reservation, uint64_t version,
                                  uint32_t timeout_ms, int* reached) {
  if (reservation == nullptr || reached == nullptr) return refuse_null("reservation or reached");
  return guarded([&] {
    *reached = reservation->reservation.wait_version(version, std::chrono::milliseconds(timeout_ms))
                   ? 1
                   : 0;
  });
}

gpumem_status gpumem_quiesce(gpumem_reservation* reservation) {
  if (reservation == nullptr) return refuse_null("reservation");
  return guarded([&] { reservation->reservation.quiesce(); });
}

gpumem_status gpumem_begin_version(gpumem_reservation* reservation, size_t bytes,
                                   gpumem_reservation_draft** draft) {
  if (reservation == nullptr || draft == nullptr) return refuse_null("reservation or draft");
  return guarded([&] {
    *draft = new gpumem_reservation_draft{reservation->reservation.begin_version(bytes)};
  });
}

void* gpumem_draft_data(const gpumem_reservation_draft* draft) {
  return draft != nullptr ? draft->draft.data() : nullptr;
}

size_t gpumem_draft_size(const gpumem_reservation_draft* draft) {
  return draft != nullptr ? draft->draft.size() : 0;
}

uint64_t gpumem_draft_version(const gpumem_reservation_draft* draft) {
  return draft != nullptr ? draft->draft.version() : 0;
}

gpumem_status gpumem_commit(gpumem_reservation_draft* draft) {
  if (draft == nullptr) return refuse_null("draft");
  return guarded([&] { draft->draft.commit(); });
}

gpumem_status gpumem_abandon(gpumem_reservation_draft* draft) {
  if (draft == nullptr) return GPUMEM_OK;
  const gpumem_status status = guarded([&] { draft->draft.abandon(); });
  delete draft;
  return status;
}

gpumem_status gpumem_sleep(gpumem_reservation* reservation, int discard, uint32_t deadline_ms) {
  if (reservation == nullptr) return refuse_null("reservation");
  return guarded([&] {
    gpumem::SleepOptions options;
    options.discard = discard != 0;
    options.deadline = std::chrono::milliseconds(deadline_ms);
    reservation->reservation.sleep(options);
  });
}

gpumem_status gpumem_wake(gpumem_reservation* reservation, uint32_t timeout_ms) {
  if (reservation == nullptr) return refuse_null("reservation");
  return guarded([&] {
    reservation->reservation.wake(timeout_ms == 0 ? std::chrono::milliseconds(60000)
                                                  : std::chrono::milliseconds(timeout_ms));
  });
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

const char* gpumem_version(void) {
  return gpumem::version().release;
}

unsigned gpumem_protocol_version(void) {
  return gpumem::version().protocol;
}
}
