#pragma once
/// @file
/// @brief The exception a request handler throws to answer with an error reply.

#include <stdexcept>
#include <string>

#include "gpumem/proto/errc.hpp"

namespace gpumem::daemon {

class request_error : public std::runtime_error {
 public:
  request_error(proto::errc code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  proto::errc code() const noexcept { return code_; }

 private:
  proto::errc code_;
};

}  // namespace gpumem::daemon
