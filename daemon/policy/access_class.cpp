#include "policy/access_class.hpp"

#include <fmt/format.h>

namespace gpumem::daemon {

namespace {
access_class made(uid_t owner, gid_t group, mode_t shared) {
  return {owner, shared != 0 ? std::optional<gid_t>(group) : std::nullopt, shared};
}
}  // namespace

access_class access_class::for_memory(uid_t owner, gid_t group, mode_t mode) noexcept {
  return made(owner, group, mode & 0066);
}

access_class access_class::for_sync(uid_t owner, gid_t group, mode_t mode) noexcept {
  const mode_t group_uses = (mode & 0060) == 0060 ? 0060 : 0;
  const mode_t others_use = (mode & 0006) == 0006 ? 0006 : 0;
  return made(owner, group, group_uses | others_use);
}

object_row access_class::sample() const {
  object_row row{};
  row.owner_uid = owner;
  row.owner_gid = group.value_or(static_cast<gid_t>(-1));
  row.mode = 0600 | shared_bits;
  return row;
}

std::string access_class::describe() const {
  if (!group) return fmt::format("uid {}, mode 0600", owner);
  return fmt::format("uid {}, group {}, mode {:04o}", owner, *group, sample().mode);
}

}  // namespace gpumem::daemon
