#include "wire_names.hpp"

#include <string>

#include "gpumem/gpumem.hpp"

namespace gpumem::detail {

proto::wire_name checked_name(std::string_view text, std::string_view what) {
  proto::wire_name name{};
  if (text.empty() || proto::make_wire_name(text, name)) {
    throw Error(errc::invalid_name, std::string(what) + " '" + std::string(text) +
                                        "' is not 1-63 characters of [A-Za-z0-9._:/@+-]");
  }
  return name;
}

proto::wire_name checked_name_or_none(std::string_view text, std::string_view what) {
  return text.empty() ? proto::wire_name{} : checked_name(text, what);
}

}  // namespace gpumem::detail
