#include "gpumem/shared/version.hpp"

#include "gpumem/gpumem.hpp"
#include "gpumem/proto/wire.hpp"

namespace gpumem {

Version version() noexcept {
  return {.release = kVersion, .protocol = proto::kProtocolVersion};
}

}  // namespace gpumem
