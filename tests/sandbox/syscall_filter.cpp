#include "syscall_filter.hpp"

#include <linux/audit.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

namespace gpumem::sandbox {

namespace {

#if defined(__x86_64__)
constexpr std::uint32_t kNativeArchitecture = AUDIT_ARCH_X86_64;
// x32 calls share the architecture value; they are told apart by this bit of the number.
constexpr std::uint32_t kForeignCallBit = 0x40000000;
#elif defined(__aarch64__)
constexpr std::uint32_t kNativeArchitecture = AUDIT_ARCH_AARCH64;
constexpr std::uint32_t kForeignCallBit = 0;
#else
#error "unit_sandbox knows x86_64 and aarch64"
#endif

/// What systemd allows under any SystemCallFilter= (systemd.exec(5)).
constexpr const char* kAlwaysAllowed[] = {"execve",        "exit",         "exit_group",
                                          "getrlimit",     "rt_sigreturn", "sigreturn",
                                          "clock_gettime", "clock_getres", "gettimeofday",
                                          "time",          "nanosleep",    "clock_nanosleep"};

constexpr std::uint32_t offset_of_nr = offsetof(seccomp_data, nr);
constexpr std::uint32_t offset_of_arch = offsetof(seccomp_data, arch);
constexpr std::uint32_t low_word_of_arg(int index) {
  return offsetof(seccomp_data, args) + 8 * index;  // little-endian: the low 32 bits first
}

sock_filter statement(std::uint16_t code, std::uint32_t k) {
  return BPF_STMT(code, k);
}
sock_filter jump(std::uint16_t code, std::uint32_t k, std::uint8_t if_true, std::uint8_t if_false) {
  return BPF_JUMP(code, k, if_true, if_false);
}

class program {
 public:
  void add(sock_filter instruction) { code_.push_back(instruction); }
  void allow() { add(statement(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)); }
  void notify() { add(statement(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF)); }
  /// A block run only for system call @p number; it must end in a return, so the accumulator
  /// holds the call's number again for whatever follows.
  template <class Body>
  void for_call(int number, Body body) {
    const std::size_t guard = code_.size();
    add(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<std::uint32_t>(number), 0, 0));
    body();
    const std::size_t length = code_.size() - guard - 1;
    if (length > 255) throw std::logic_error("seccomp block longer than a jump reaches");
    code_[guard].jf = static_cast<std::uint8_t>(length);
  }
  std::vector<sock_filter> take() { return std::move(code_); }

 private:
  std::vector<sock_filter> code_;
};

}  // namespace

const std::map<std::string, int>& syscall_numbers() {
  static const std::map<std::string, int> numbers{
#include "syscall_numbers.inc"
  };
  return numbers;
}

std::string syscall_name(int number) {
  for (const auto& [name, each] : syscall_numbers()) {
    if (each == number) return name;
  }
  return "#" + std::to_string(number);
}

bool needs_filter(const unit_settings& settings) {
  return !settings.allowed_syscalls.empty() || settings.native_architecture_only ||
         !settings.address_families.empty() || settings.memory_deny_write_execute;
}

std::vector<int> allowed_syscall_numbers(const unit_settings& settings) {
  std::vector<int> numbers;
  if (settings.allowed_syscalls.empty()) return numbers;
  auto add = [&](const std::string& name) {
    // A group lists calls of other architectures too (arm_fadvise64_64): not ours to allow.
    if (const auto found = syscall_numbers().find(name); found != syscall_numbers().end()) {
      numbers.push_back(found->second);
    }
  };
  for (const auto& name : settings.allowed_syscalls) add(name);
  for (const char* name : kAlwaysAllowed) add(name);
  std::ranges::sort(numbers);
  numbers.erase(std::ranges::unique(numbers).begin(), numbers.end());
  return numbers;
}

std::vector<sock_filter> build_filter(const unit_settings& settings) {
  const std::vector<int> allowed = allowed_syscall_numbers(settings);
  const bool filtering_calls = !allowed.empty();
  auto is_allowed = [&](int number) {
    return !filtering_calls || std::ranges::binary_search(allowed, number);
  };
  program filter;
  filter.add(statement(BPF_LD | BPF_W | BPF_ABS, offset_of_arch));
  filter.add(jump(BPF_JMP | BPF_JEQ | BPF_K, kNativeArchitecture, 1, 0));
  filter.add(statement(BPF_RET | BPF_K, settings.native_architecture_only ? SECCOMP_RET_KILL_PROCESS
                                                                          : SECCOMP_RET_ALLOW));
  filter.add(statement(BPF_LD | BPF_W | BPF_ABS, offset_of_nr));
  if (kForeignCallBit != 0 && settings.native_architecture_only) {
    filter.add(jump(BPF_JMP | BPF_JGE | BPF_K, kForeignCallBit, 0, 1));
    filter.notify();
  }
  auto end_of_checked_call = [&](int number) {
    if (is_allowed(number)) {
      filter.allow();
    } else {
      filter.notify();
    }
  };
  if (!settings.address_families.empty()) {
    filter.for_call(SYS_socket, [&] {
      filter.add(statement(BPF_LD | BPF_W | BPF_ABS, low_word_of_arg(0)));
      for (const int family : settings.address_families) {
        filter.add(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<std::uint32_t>(family), 0, 1));
        end_of_checked_call(SYS_socket);
      }
      filter.notify();
    });
  }
  if (settings.memory_deny_write_execute) {
    filter.for_call(SYS_mmap, [&] {
      filter.add(statement(BPF_LD | BPF_W | BPF_ABS, low_word_of_arg(2)));
      filter.add(statement(BPF_ALU | BPF_AND | BPF_K, PROT_WRITE | PROT_EXEC));
      filter.add(jump(BPF_JMP | BPF_JEQ | BPF_K, PROT_WRITE | PROT_EXEC, 0, 1));
      filter.notify();
      end_of_checked_call(SYS_mmap);
    });
    for (const int number : {SYS_mprotect, SYS_pkey_mprotect}) {
      filter.for_call(number, [&] {
        filter.add(statement(BPF_LD | BPF_W | BPF_ABS, low_word_of_arg(2)));
        filter.add(jump(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 0, 1));
        filter.notify();
        end_of_checked_call(number);
      });
    }
  }
  for (const int number : allowed) {
    filter.add(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<std::uint32_t>(number), 0, 1));
    filter.allow();
  }
  if (filtering_calls) {
    filter.notify();
  } else {
    filter.allow();
  }
  return filter.take();
}

}  // namespace gpumem::sandbox
