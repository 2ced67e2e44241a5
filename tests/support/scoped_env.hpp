#pragma once
// An environment variable set for one scope of a test, and put back as it was however the scope
// ends (a failed ASSERT returns early): a variable left behind would change every later test's
// clients.

#include <cstdlib>
#include <optional>
#include <string>

namespace gpumem::testing {

class scoped_env {
 public:
  scoped_env(const char* name, const std::string& value) : name_(name) {
    if (const char* before = std::getenv(name)) before_ = before;
    ::setenv(name, value.c_str(), 1);
  }
  ~scoped_env() {
    if (before_) {
      ::setenv(name_.c_str(), before_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  std::string name_;
  std::optional<std::string> before_;
};

}  // namespace gpumem::testing
