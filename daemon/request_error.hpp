#pragma once
/// @file
/// @brief The exception a request handler throws to answer with an error reply.

#include <stdexcept>
#include <string>
#include <utility>

#include "gpumem/proto/errc.hpp"

namespace gpumem::daemon {

class request_error : public std::runtime_error {
 public:
  request_error(proto::errc code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  /// @param logged_only what the daemon's log line adds to @p message and the client never
  /// reads: an object's owner and mode where the client may not learn them.
  request_error(proto::errc code, const std::string& message, std::string logged_only)
      : std::runtime_error(message), code_(code), logged_only_(std::move(logged_only)) {}
  proto::errc code() const noexcept { return code_; }
  const std::string& logged_only() const noexcept { return logged_only_; }

 private:
  proto::errc code_;
  std::string logged_only_;
};

}  // namespace gpumem::daemon
