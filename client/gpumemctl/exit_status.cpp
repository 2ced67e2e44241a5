#include "exit_status.hpp"

namespace gpumemctl {

std::string exit_statuses_text() {
  std::string text = "Exit status:\n";
  for (const auto& row : kExitStatuses) {
    text += "  " + std::to_string(static_cast<int>(row.status)) + "  " + std::string(row.meaning) +
            "\n";
  }
  return text + std::string(kInterruptedNote) + "\n";
}

exit_status connect_failure(gpumem::errc code) {
  switch (code) {
    case gpumem::errc::permission_denied:
      return exit_status::permission_denied;
    case gpumem::errc::invalid_argument:
      return exit_status::bad_arguments;
    case gpumem::errc::quota_exceeded:
      return exit_status::busy;  // it answered: it has as many connections as it may
    default:
      return exit_status::no_daemon;
  }
}

exit_status request_failure(gpumem::errc code) {
  switch (code) {
    case gpumem::errc::not_found:
      return exit_status::not_found;
    case gpumem::errc::permission_denied:
      return exit_status::permission_denied;
    case gpumem::errc::busy:
    case gpumem::errc::wrong_state:
      return exit_status::busy;
    case gpumem::errc::invalid_name:
    case gpumem::errc::invalid_argument:
      return exit_status::bad_arguments;
    // The daemon went away during the call, and did not come back within the reconnect time.
    case gpumem::errc::io_error:
    case gpumem::errc::connection_closed:
    case gpumem::errc::session_lost:
      return exit_status::no_daemon;
    default:
      return exit_status::failed;
  }
}

std::string_view errc_name(gpumem::errc code) {
  switch (code) {
#define GPUMEM_X(name, value, text) \
  case gpumem::errc::name:          \
    return #name;
    GPUMEM_ERRC_TABLE(GPUMEM_X)
#undef GPUMEM_X
  }
  return "unknown";
}

nlohmann::json error_json(std::string_view code, std::string_view message, exit_status status) {
  return {
      {"error", {{"code", code}, {"message", message}, {"exit_code", static_cast<int>(status)}}}};
}

}  // namespace gpumemctl
