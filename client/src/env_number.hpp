#pragma once
/// @file
/// @brief The library's settings that come from the environment ($GPUMEM_TIMEOUT_MS and the
/// like): whole numbers in a range, a clear error otherwise.

#include <cstdlib>
#include <optional>
#include <string>

#include "gpumem/gpumem.hpp"

namespace gpumem::detail {

/// @brief The whole number in the environment variable @p name.
/// @return nullopt when it is unset or empty.
/// @throws Error(invalid_argument) naming the variable, its text and @p meaning (what it should
/// be) when it is not a number from @p least to @p most.
inline std::optional<long long> number_from_env(const char* name, long long least, long long most,
                                                const char* meaning) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (*end != '\0' || value < least || value > most) {
    throw Error(errc::invalid_argument,
                std::string("$") + name + " is '" + text + "', not " + meaning);
  }
  return value;
}

}  // namespace gpumem::detail
