#pragma once
/// @file
/// @brief What a pidfd says of its process.

namespace gpumem::os {

/// @brief Whether the process of @p pidfd has exited: its pidfd is readable then. Checked
/// without waiting, so that a spurious wake-up of a reactor is never taken for a death.
bool process_exited(int pidfd) noexcept;

}  // namespace gpumem::os
