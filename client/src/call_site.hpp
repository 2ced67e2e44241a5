#pragma once
/// @file
/// @brief Makes the public gpumem::CallSite from a std::source_location (and reads it back).

#include <cstring>
#include <source_location>
#include <type_traits>

#include "gpumem/gpumem.hpp"

namespace gpumem::detail {

struct call_site_access {
  static CallSite make(const std::source_location& where) noexcept {
    // GCC and Clang lay a source_location out as one pointer to a static record, with
    // libstdc++ and libc++ alike; CallSite keeps exactly those bytes.
    static_assert(sizeof(std::source_location) == sizeof(CallSite::site_));
    static_assert(std::is_trivially_copyable_v<std::source_location>);
    CallSite site;
    std::memcpy(site.site_, &where, sizeof where);
    return site;
  }
  static std::source_location read(const CallSite& site) noexcept {
    std::source_location where;
    std::memcpy(&where, site.site_, sizeof where);
    return where;
  }
};

}  // namespace gpumem::detail
