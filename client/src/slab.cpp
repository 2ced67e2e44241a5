#include "gpumem/slab.hpp"

#include <mutex>
#include <unordered_map>

#include "gpumem/shared/range_allocator.hpp"

namespace gpumem {

struct Slab::state {
  Buffer buffer;
  mutable std::mutex mutex;
  range_allocator ranges;
  std::unordered_map<std::uint64_t, std::uint64_t> live;  ///< offset -> size

  state(Buffer leased, std::size_t bytes)
      : buffer(std::move(leased)), ranges(bytes - bytes % kAlignment, kAlignment) {}
};

Slab Slab::lease(Client& client, std::size_t bytes, const AllocateOptions& options) {
  if (bytes < kAlignment) {
    throw Error(errc::invalid_argument,
                "a slab holds at least " + std::to_string(kAlignment) + " bytes");
  }
  return Slab(std::make_unique<state>(client.allocate(bytes, options), bytes));
}

Slab::Slab(std::unique_ptr<state> self) : self_(std::move(self)) {}
Slab::Slab(Slab&&) noexcept = default;
Slab& Slab::operator=(Slab&&) noexcept = default;
Slab::~Slab() = default;

SlabPiece Slab::allocate(std::size_t bytes) {
  if (bytes == 0) throw Error(errc::invalid_argument, "cannot allocate 0 bytes from a slab");
  std::lock_guard lock(self_->mutex);
  const auto offset = self_->ranges.allocate(bytes);
  if (!offset) {
    throw Error(errc::out_of_memory, "slab " + std::to_string(self_->buffer.id()) + " cannot fit " +
                                         std::to_string(bytes) + " bytes: largest free range " +
                                         std::to_string(self_->ranges.largest_free_block()) +
                                         " bytes");
  }
  self_->live.emplace(*offset, bytes);
  return {self_->buffer.id(), *offset, bytes};
}

void Slab::free(const SlabPiece& piece) {
  std::lock_guard lock(self_->mutex);
  const auto found = self_->live.find(piece.offset);
  if (piece.slab != self_->buffer.id() || found == self_->live.end() ||
      found->second != piece.size) {
    throw Error(errc::invalid_argument, "not a live piece of slab " +
                                            std::to_string(self_->buffer.id()) + ": offset " +
                                            std::to_string(piece.offset));
  }
  self_->ranges.free(piece.offset, piece.size);  // first: it may throw, changing nothing
  self_->live.erase(found);
}

void* Slab::data(const SlabPiece& piece) const {
  return self_->buffer.at(piece);
}

const Buffer& Slab::buffer() const noexcept {
  return self_->buffer;
}

std::size_t Slab::bytes_free() const {
  std::lock_guard lock(self_->mutex);
  return self_->ranges.capacity() - self_->ranges.bytes_allocated();
}

}  // namespace gpumem
