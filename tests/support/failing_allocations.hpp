#pragma once
// While a failing_allocations lives, every operator new on its thread throws std::bad_alloc:
// for checking that code which runs where nothing may throw allocates nothing, and that an
// allocation that fails changes nothing. Linked only into the tests that use it (it replaces
// the global operator new and delete of its program).

namespace gpumem::testing {

class failing_allocations {
 public:
  failing_allocations() noexcept;
  ~failing_allocations();
  failing_allocations(const failing_allocations&) = delete;
  failing_allocations& operator=(const failing_allocations&) = delete;
};

}  // namespace gpumem::testing
