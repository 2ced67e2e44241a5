#include "support/failing_allocations.hpp"

#include <cstdlib>
#include <new>

namespace {
thread_local bool failing = false;

void* allocate(std::size_t size) {
  if (failing) throw std::bad_alloc();
  if (void* memory = std::malloc(size == 0 ? 1 : size)) return memory;
  throw std::bad_alloc();
}
}  // namespace

namespace gpumem::testing {
failing_allocations::failing_allocations() noexcept {
  failing = true;
}
failing_allocations::~failing_allocations() {
  failing = false;
}
}  // namespace gpumem::testing

void* operator new(std::size_t size) {
  return allocate(size);
}
void* operator new[](std::size_t size) {
  return allocate(size);
}
void operator delete(void* memory) noexcept {
  std::free(memory);
}
void operator delete[](void* memory) noexcept {
  std::free(memory);
}
void operator delete(void* memory, std::size_t) noexcept {
  std::free(memory);
}
void operator delete[](void* memory, std::size_t) noexcept {
  std::free(memory);
}
