#pragma once
/// @file
/// @brief How long a call through the request mailbox may spin for its answer before it sleeps
/// on the futex.
///
/// Asleep, a call pays the futex wake-up after the daemon answers, and the daemon pays for waking
/// it: on an H200 host a ping took 16 us asleep and 10 spinning, and even on the 2-core
/// development VM spinning calls made about as many calls per second as sleeping ones or more,
/// at less client CPU per call (answer_spin_bench; figures in the README). The budget a call spins
/// is learnt (sync::spin_budget, from zero): calls that keep outlasting the longest spin, as on a
/// node with many more busy clients than cores, mostly stop spinning. A process that may use less
/// than 2 CPUs (its affinity, or its cgroup's CPU quota) does not spin by default: there the
/// spin takes the CPU the process is rationed.

#include <chrono>
#include <filesystem>

namespace gpumem::detail {

/// The default longest spin where the process may use enough CPUs.
inline constexpr std::chrono::microseconds kAnswerSpin{50};
/// The most $GPUMEM_ANSWER_SPIN_US may ask: below the first check of the socket for the
/// daemon's end (1 ms), which a spin does not make.
inline constexpr std::chrono::microseconds kLongestAnswerSpin{1000};
/// A process spins by default where it may use at least this many CPUs.
inline constexpr double kCpusToSpin = 2;

/// @brief The longest spin for this process: $GPUMEM_ANSWER_SPIN_US (0: never) when set,
/// else kAnswerSpin where the process may use kCpusToSpin CPUs, else zero.
/// @throws Error(invalid_argument) for a value that is not a number from 0 to 1000.
std::chrono::microseconds longest_answer_spin();

/// @brief The CPUs this process may use: those of its affinity, fewer where the CPU quota of
/// its cgroup (v2, `cpu.max`, of its own or a parent group) allows less.
/// @param cgroups where the cgroup tree is mounted; @param membership the file that names the
/// process's group (`0::/path`). Other places only for tests.
double usable_cpus(const std::filesystem::path& cgroups = "/sys/fs/cgroup",
                   const std::filesystem::path& membership = "/proc/self/cgroup");

}  // namespace gpumem::detail
