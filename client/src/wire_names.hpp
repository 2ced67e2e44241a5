#pragma once
/// @file
/// @brief Names as requests carry them, checked before anything is sent, so that a refusal
/// names what was named and the rule rather than coming back from the daemon as a bare code.

#include <string_view>

#include "gpumem/proto/wire.hpp"

namespace gpumem::detail {

/// @brief @p text as a request's name. @p what names it in the error ("lock name").
/// @throws Error(invalid_name) unless it is 1-63 characters of [A-Za-z0-9._:/@+-].
proto::wire_name checked_name(std::string_view text, std::string_view what);

/// @brief As checked_name(), where empty stands for no name (an anonymous allocation).
proto::wire_name checked_name_or_none(std::string_view text, std::string_view what);

}  // namespace gpumem::detail
