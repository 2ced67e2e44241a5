/**
 * @file
 * @brief C API of libgpumem, for other languages: connecting, buffers and reservations, as in
 * <gpumem/gpumem.hpp> and <gpumem/reservation.hpp>. Locks, barriers, channels, slabs, events
 * and the daemon's listings are in the C++ API only (all but slabs and events in Python too).
 *
 * Every function that can fail returns a gpumem_status; GPUMEM_OK is 0. A call that fails
 * leaves its out-parameters as they were. gpumem_last_error() has the text of the calling
 * thread's last failure, and "" once a call that can fail succeeded (the accessors, and
 * releasing NULL, leave it). Host memory that libgpumem itself could not get is
 * GPUMEM_INTERNAL, "out of host memory".
 */
#ifndef GPUMEM_GPUMEM_H
#define GPUMEM_GPUMEM_H

#include <stddef.h>
#include <stdint.h>

#include "gpumem/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The numbers are those of the protocol (gpumem::errc) and never change. */
typedef enum gpumem_status {
  GPUMEM_OK = 0,
  GPUMEM_BAD_MESSAGE = 1,
  GPUMEM_UNSUPPORTED_VERSION = 2,
  GPUMEM_UNKNOWN_MESSAGE_TYPE = 3,
  GPUMEM_INVALID_NAME = 4,
  GPUMEM_INVALID_ARGUMENT = 5,
  GPUMEM_NOT_FOUND = 6,
  GPUMEM_ALREADY_EXISTS = 7,
  GPUMEM_OUT_OF_MEMORY = 8,
  GPUMEM_NO_SUCH_DEVICE = 9,
  GPUMEM_PERMISSION_DENIED = 10,
  GPUMEM_UNEXPECTED_HANDLE = 11,
  GPUMEM_CONNECTION_CLOSED = 12,
  GPUMEM_IO_ERROR = 13,
  GPUMEM_INTERNAL = 14,
  GPUMEM_CUDA_ERROR = 15,
  GPUMEM_NOT_SUPPORTED = 16,
  GPUMEM_NOT_LOCK_OWNER = 17,
  GPUMEM_NOT_RECOVERABLE = 18,
  GPUMEM_WRONG_DOMAIN = 19,
  GPUMEM_NO_PARTY_LEFT = 20,
  GPUMEM_QUOTA_EXCEEDED = 21,
  GPUMEM_TIMED_OUT = 22,
  GPUMEM_SESSION_LOST = 23,
  GPUMEM_BUSY = 24,
  GPUMEM_WRONG_STATE = 25
} gpumem_status;

#define GPUMEM_HOST (-1)

typedef struct gpumem_client gpumem_client;
typedef struct gpumem_buffer gpumem_buffer;

/** @param socket_path NULL for the default locations. */
GPUMEM_API gpumem_status gpumem_connect(const char* socket_path, gpumem_client** client);

/** What gpumem_connect_with() takes; zero-initialise it, then set what you need. */
typedef struct gpumem_connect_options {
  const char* socket_path; /**< NULL or "": the default locations */
  const char* label;       /**< NULL or "": the program's name */
  /** Longest wait for one reply before a call fails with GPUMEM_TIMED_OUT (the client is
   *  unusable afterwards); 0: $GPUMEM_TIMEOUT_MS, else 60000. */
  uint32_t timeout_ms;
  /** Nonzero: daemon_uid below is the uid gpumemd runs as. Zero: $GPUMEM_DAEMON_UID, else root,
   *  the caller's uid or the user gpumemd. A socket of another uid is GPUMEM_PERMISSION_DENIED. */
  int has_daemon_uid;
  uint32_t daemon_uid;
  /** Nonzero: reconnect_ms below is how long a call whose connection broke (gpumemd
   *  restarted) tries to connect again and resume the session, 0 for never. Zero:
   *  $GPUMEM_RECONNECT_MS, else 10000. A daemon that stays away is GPUMEM_IO_ERROR; one that
   *  restarted without the session's state is GPUMEM_SESSION_LOST, for every later call too. */
  int has_reconnect_ms;
  uint32_t reconnect_ms;
} gpumem_connect_options;

/** @param options NULL: every default, as gpumem_connect(NULL, client). */
GPUMEM_API gpumem_status gpumem_connect_with(const gpumem_connect_options* options,
                                             gpumem_client** client);
/** Closes the client; buffers it handed out stay valid until released. NULL is ignored. */
GPUMEM_API void gpumem_disconnect(gpumem_client* client);

/** @param name NULL or "" for an anonymous allocation. */
GPUMEM_API gpumem_status gpumem_allocate(gpumem_client* client, size_t bytes, int device,
                                         const char* name, gpumem_buffer** buffer);
/** From now on (only != 0) or no longer, this client's opens by name (gpumem_open,
 *  gpumem_open_reservation) open only objects its uid made: another user's of the name is
 *  GPUMEM_PERMISSION_DENIED, not opened (names are first come, first served, and another user
 *  may take one first with a mode that lets you in). GPUMEM_NOT_SUPPORTED from a daemon that
 *  cannot check it. As gpumem::Client::open_own_objects_only(). */
GPUMEM_API gpumem_status gpumem_open_own_objects_only(gpumem_client* client, int only);
GPUMEM_API gpumem_status gpumem_open(gpumem_client* client, const char* name, int read_only,
                                     gpumem_buffer** buffer);
/** Lets go of the buffer and frees the handle, whatever the status. NULL is ignored. */
GPUMEM_API gpumem_status gpumem_release(gpumem_buffer* buffer);

GPUMEM_API void* gpumem_buffer_data(const gpumem_buffer* buffer);
GPUMEM_API size_t gpumem_buffer_size(const gpumem_buffer* buffer);
GPUMEM_API uint64_t gpumem_buffer_id(const gpumem_buffer* buffer);

/**
 * Reservations (<gpumem/reservation.hpp>): a range at a fixed address in every holder, in
 * versions, that sleeps to host memory and wakes at the same address.
 */
typedef struct gpumem_reservation gpumem_reservation;
/** The next version of a reservation while its owner writes it. */
typedef struct gpumem_reservation_draft gpumem_reservation_draft;

/** @param device GPUMEM_HOST or a CUDA device. @param name NULL or "" for an anonymous one. */
GPUMEM_API gpumem_status gpumem_reserve(gpumem_client* client, size_t max_bytes, size_t initial,
                                        int device, const char* name,
                                        gpumem_reservation** reservation);
GPUMEM_API gpumem_status gpumem_open_reservation(gpumem_client* client, const char* name,
                                                 int read_only, gpumem_reservation** reservation);
/** Unmaps, lets go of it and frees the handle, whatever the status. NULL is ignored. A draft
 *  of it not yet committed goes with it: gpumem_commit() then says GPUMEM_WRONG_STATE, and
 *  gpumem_abandon() only frees the draft's handle. */
GPUMEM_API gpumem_status gpumem_release_reservation(gpumem_reservation* reservation);

/** Fixed for the reservation's life, across versions, sleep and wake. */
GPUMEM_API void* gpumem_reservation_data(const gpumem_reservation* reservation);
/** Bytes mapped here now (0 while asleep or quiesced). */
GPUMEM_API size_t gpumem_reservation_size(const gpumem_reservation* reservation);
/** The version mapped here, as of the last refresh. */
GPUMEM_API uint64_t gpumem_reservation_version(const gpumem_reservation* reservation);
GPUMEM_API uint64_t gpumem_reservation_id(const gpumem_reservation* reservation);

/** Owner only, version 1 only: @p bytes are backed afterwards. As for gpumem_commit(), a
 *  failure can come after the change, from mapping it here; gpumem_refresh() tries again. */
GPUMEM_API gpumem_status gpumem_resize_reservation(gpumem_reservation* reservation, size_t bytes);
/** Maps what is current. @param size NULL, or where the bytes mapped afterwards go. */
GPUMEM_API gpumem_status gpumem_refresh(gpumem_reservation* reservation, size_t* size);
/** Waits until the current version is at least @p version, then refreshes.
 *  @param reached set to 1 when it came, 0 when @p timeout_ms passed first. */
GPUMEM_API gpumem_status gpumem_wait_version(gpumem_reservation* reservation, uint64_t version,
                                             uint32_t timeout_ms, int* reached);
/** Lets go of the mapping (the range stays reserved); the next refresh maps again. */
GPUMEM_API gpumem_status gpumem_quiesce(gpumem_reservation* reservation);

/** Owner only: starts the next version, of @p bytes, mapped writable at its own address. */
GPUMEM_API gpumem_status gpumem_begin_version(gpumem_reservation* reservation, size_t bytes,
                                              gpumem_reservation_draft** draft);
GPUMEM_API void* gpumem_draft_data(const gpumem_reservation_draft* draft);
GPUMEM_API size_t gpumem_draft_size(const gpumem_reservation_draft* draft);
GPUMEM_API uint64_t gpumem_draft_version(const gpumem_reservation_draft* draft);
/** Makes the draft the current version and maps it in the reservation. A refusal changes
 *  nothing (GPUMEM_BUSY: its memory is mapped writable elsewhere). One failure comes after the
 *  commit: mapping the new version here (the reservation's version still says the old one);
 *  gpumem_refresh() tries again. The handle stays for gpumem_abandon() either way. */
GPUMEM_API gpumem_status gpumem_commit(gpumem_reservation_draft* draft);
/** Drops the draft unless it was committed, and frees the handle, whatever the status. NULL is
 *  ignored. */
GPUMEM_API gpumem_status gpumem_abandon(gpumem_reservation_draft* draft);

/** Puts it to sleep (its bytes to the host, or dropped with @p discard nonzero) and waits.
 *  @param deadline_ms how long other holders get to let go; 0: the daemon's default (5 s).
 *  At most 600000 (10 minutes): gpumemd refuses a longer one with GPUMEM_INVALID_ARGUMENT.
 *  GPUMEM_BUSY names each holder that did not; it stays awake then. */
GPUMEM_API gpumem_status gpumem_sleep(gpumem_reservation* reservation, int discard,
                                      uint32_t deadline_ms);
/** Wakes it, waits at most @p timeout_ms (0: 60000) and maps it here again. */
GPUMEM_API gpumem_status gpumem_wake(gpumem_reservation* reservation, uint32_t timeout_ms);

/** Text of the last failure on this thread; "" when none. */
GPUMEM_API const char* gpumem_last_error(void);
/** Fixed description of a status, e.g. "no such object". */
GPUMEM_API const char* gpumem_status_string(int status);

/** The release of the libgpumem in use, e.g. "0.1.0" (a static string): the shared library
 *  is found at run time, so it can differ from the headers a program was built with. */
GPUMEM_API const char* gpumem_version(void);
/** The version of the wire protocol that this libgpumem speaks to gpumemd. */
GPUMEM_API unsigned gpumem_protocol_version(void);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_GPUMEM_H */
