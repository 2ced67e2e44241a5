#include "call_site.hpp"

namespace gpumem {

const char* CallSite::file_name() const noexcept {
  return detail::call_site_access::read(*this).file_name();
}

std::uint_least32_t CallSite::line() const noexcept {
  return detail::call_site_access::read(*this).line();
}

const char* CallSite::function_name() const noexcept {
  return detail::call_site_access::read(*this).function_name();
}

}  // namespace gpumem
