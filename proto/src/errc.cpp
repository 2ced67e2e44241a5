#include "gpumem/proto/errc.hpp"

#include <string>

namespace gpumem::proto {

bool is_known_errc(std::uint32_t raw) noexcept {
  switch (raw) {
#define GPUMEM_X(name, value, text) case value:
    GPUMEM_ERRC_TABLE(GPUMEM_X)
#undef GPUMEM_X
    return true;
    default:
      return false;
  }
}

std::string_view describe(errc code) noexcept {
  switch (code) {
#define GPUMEM_X(name, value, text) \
  case errc::name:                  \
    return text;
    GPUMEM_ERRC_TABLE(GPUMEM_X)
#undef GPUMEM_X
  }
  return "unknown gpumem status";
}

namespace {
class category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "gpumem"; }
  std::string message(int value) const override {
    return std::string(describe(static_cast<errc>(value)));
  }
};
}  // namespace

const std::error_category& gpumem_category() noexcept {
  static const category instance;
  return instance;
}

}  // namespace gpumem::proto
