#pragma once
/// @file
/// @brief A shared virtual range on a GPU that grows and shrinks in place.
///
/// @code
///   auto kv = gpumem::Reservation::create(client, 8ull << 30, {.device = 0, .name = "kv",
///                                                               .initial = 64 << 20});
///   kv.resize(256 << 20);            // owner: commit more; kv.data() does not move
///   // in another process:
///   auto same = gpumem::Reservation::open(other, "kv", {.access = gpumem::Access::read_only});
///   same.refresh();                  // maps what was committed since; same.data() stays put
/// @endcode
///
/// The daemon holds the physical chunks (cuMemCreate, 2 MiB on an H100); every holder maps them
/// at the same offsets of its own reserved range. A read-only holder maps them without write
/// access, so a kernel that writes there faults. Mapping changes are host calls that take
/// effect at once: resize down or release only after the GPU work on that part has finished.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "gpumem/gpumem.hpp"

namespace gpumem {

struct ReserveOptions {
  int device = 0;
  std::string_view name{};  ///< empty: anonymous
  std::size_t initial = 0;  ///< bytes committed at once, rounded up to whole chunks
  Mode mode{};              ///< who else may open it (see gpumem::Mode)
};

struct OpenReservationOptions {
  Access access = Access::read_write;
};

class Reservation {
 public:
  /// @throws Error: not_supported without CUDA, already_exists, no_such_device, out_of_memory.
  static Reservation create(Client& client, std::size_t max_bytes, const ReserveOptions& = {});
  /// @throws Error(not_found) when no reservation has that name.
  static Reservation open(Client& client, std::string_view name,
                          const OpenReservationOptions& = {});

  Reservation(Reservation&&) noexcept;
  Reservation& operator=(Reservation&&) noexcept;
  ~Reservation();  ///< as release(), swallowing errors

  /// Start of the range in this process (a device pointer); fixed for the object's life.
  void* data() const noexcept;
  /// Bytes mapped here now, from data() on.
  std::size_t size() const noexcept;
  std::size_t max_size() const noexcept;
  std::size_t chunk_size() const noexcept;
  std::uint64_t id() const noexcept;
  int device() const noexcept;
  Access access() const noexcept;

  /// @brief Owner only: commit or decommit at the end so that @p bytes (rounded up to whole
  /// chunks) are backed, then map the change here.
  /// @throws Error(permission_denied) for a holder that is not the owner.
  void resize(std::size_t bytes);
  /// @brief Maps what the owner committed since, unmaps what it decommitted.
  /// @return size() afterwards.
  std::size_t refresh();
  /// @brief Unmaps everything and lets go; the chunks live on while another holder maps them.
  void release();

 private:
  struct state;
  explicit Reservation(std::unique_ptr<state> self);
  std::unique_ptr<state> self_;
};

}  // namespace gpumem
