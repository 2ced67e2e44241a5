#include "config/config.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "config/reload_plan.hpp"
#include "gpumem/proto/wire.hpp"
#include "gpumem/shared/version.hpp"

namespace gpumem::daemon {
namespace {

struct command_result {
  int exit_status = -1;
  std::string output;
};

/// Runs the real gpumemd with @p arguments (a shell command line's tail) and collects stdout.
command_result run_gpumemd(const std::string& arguments) {
  const std::string command = std::string("'") + GPUMEM_TEST_DAEMON + "' " + arguments;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {};
  command_result result;
  char buffer[4096];
  while (const std::size_t got = std::fread(buffer, 1, sizeof buffer, pipe)) {
    result.output.append(buffer, got);
  }
  const int status = ::pclose(pipe);
  if (WIFEXITED(status)) result.exit_status = WEXITSTATUS(status);
  return result;
}

std::string contents_of(const std::string& path) {
  std::ostringstream text;
  text << std::ifstream(path, std::ios::binary).rdbuf();
  return text.str();
}

class ConfigFile : public ::testing::Test {
 protected:
  ~ConfigFile() override { ::unlink(path.c_str()); }
  daemon_config load(const std::string& text) {
    std::ofstream(path) << text;
    return load_config_file(path);
  }
  std::string error_of(const std::string& text) {
    try {
      load(text);
    } catch (const config_error& error) {
      return error.what();
    }
    return "no error";
  }
  std::string path =
      ::testing::TempDir() + "gpumemd-config-test-" + std::to_string(::getpid()) + ".yaml";
};

TEST(ParseSize, AcceptsBytesAndBinaryAndDecimalUnits) {
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_EQ(parse_size("64KiB"), 64u << 10);
  EXPECT_EQ(parse_size("1.5GiB"), 3ull << 29);
  EXPECT_EQ(parse_size("2 MiB"), 2u << 20);
  EXPECT_EQ(parse_size("3MB"), 3000000u);
  EXPECT_EQ(parse_size("1TiB"), 1ull << 40);
}

TEST(ParseSize, RejectsWhatIsNotASize) {
  for (const char* bad :
       {"", "GiB", "-1GiB", "12XB", "1e400GiB", "0x10", "1.5", "99999999999999999999"}) {
    EXPECT_THROW(parse_size(bad), config_error) << bad;
  }
}

TEST(EmbeddedDefault, HasOneHostPool) {
  const auto config = embedded_default_config();
  ASSERT_EQ(config.pools.size(), 1u);
  EXPECT_EQ(config.pools[0].name, "host");
  EXPECT_EQ(config.pools[0].device, proto::kHostDevice);
  EXPECT_EQ(config.pools[0].size, 1u << 30);
}

TEST(EmbeddedDefault, SetsEveryTopLevelKeyToItsDocumentedDefault) {
  const auto config = embedded_default_config();
  EXPECT_EQ(config.socket_path, "");
  EXPECT_EQ(config.socket_mode, 0600u);
  EXPECT_EQ(config.log_level, "info");
  EXPECT_EQ(config.access.default_mode, 0600u);
  EXPECT_EQ(config.max_output_bytes, 4u << 20);
}

TEST(DefaultCudaPool, IsNamedForItsDeviceAsLargeAsItAndKeepsAllFreedMemory) {
  const auto pool = default_cuda_pool(1, 80ull << 30);
  EXPECT_EQ(pool.name, "cuda1");
  EXPECT_EQ(pool.device, 1);
  EXPECT_EQ(pool.size, 80ull << 30);
  EXPECT_EQ(pool.release_threshold, 80ull << 30);
  EXPECT_TRUE(pool.peer_access.empty());
}

TEST(PrintDefaultConfig, PrintsDeployExampleByteForByte) {
  const auto printed = run_gpumemd("--print-default-config");
  EXPECT_EQ(printed.exit_status, 0);
  EXPECT_EQ(printed.output, contents_of(GPUMEM_SOURCE_DIR "/deploy/gpumemd.example.yaml"))
      << "regenerate it: gpumemd --print-default-config > deploy/gpumemd.example.yaml";
}

TEST_F(ConfigFile, ReadsEveryKey) {
  const auto config = load(R"(
socket: /tmp/x.sock
socket_mode: "0660"
log_level: debug
open_across_users: true
max_output_bytes: 1MiB
pools:
  - name: staging
    device: host
    size: 256MiB
  - name: gpu0
    device: 0
    size: 8GiB
    release_threshold: 1GiB
    peer_access: [1, 2]
)");
  EXPECT_EQ(config.socket_path, "/tmp/x.sock");
  EXPECT_EQ(config.socket_mode, 0660u);
  EXPECT_EQ(config.log_level, "debug");
  EXPECT_EQ(config.access.default_mode, 0666u);
  EXPECT_EQ(config.max_output_bytes, 1u << 20);
  ASSERT_EQ(config.pools.size(), 2u);
  EXPECT_EQ(config.pools[1].device, 0);
  EXPECT_EQ(config.pools[1].release_threshold, 1u << 30);
  EXPECT_EQ(config.pools[1].peer_access, (std::vector<std::int32_t>{1, 2}));
}

TEST_F(ConfigFile, PrintedDefaultLoadsAsTheEmbeddedDefault) {
  const auto printed = run_gpumemd("--print-default-config");
  ASSERT_EQ(printed.exit_status, 0);
  EXPECT_EQ(load(printed.output), embedded_default_config());
}

TEST_F(ConfigFile, AnFdStoreWithLittleRoomBesideTheConnectionsIsSaidNotRefused) {
  // Refused, it would stop the restart of a configuration that ran before the key existed.
  for (const char* text : {"fd_store_max: 4096\n", "max_connections: 18446744073709551104\n"}) {
    const auto config = load(text);
    const std::vector<std::string> notices = config_notices(config);
    ASSERT_EQ(notices.size(), 1u) << text;
    EXPECT_EQ(notices[0].find("fd_store_max "), 0u) << notices[0];
    EXPECT_NE(notices[0].find("at least max_connections + 512"), std::string::npos) << notices[0];
  }
  EXPECT_TRUE(config_notices(load("fd_store_max: 4608\n")).empty());  // 4096 connections + 512
  EXPECT_TRUE(config_notices(load("max_connections: 8\nfd_store_max: 520\n")).empty());
}

TEST_F(ConfigFile, APoolWithoutReleaseThresholdKeepsAllFreedMemory) {
  const auto config = load("pools:\n  - {name: gpu0, device: 0, size: 8GiB}\n");
  ASSERT_EQ(config.pools.size(), 1u);
  EXPECT_EQ(config.pools[0].release_threshold, 8ull << 30);
}

TEST_F(ConfigFile, AReleaseThresholdBelowThePoolsSizeIsValidButSaidToDoNothing) {
  const auto config = load(
      "pools:\n  - {name: host, device: host, size: 64MiB}\n"
      "  - {name: gpu0, device: 0, size: 8GiB, release_threshold: 8GiB}\n"
      "  - {name: gpu1, device: 1, size: 8GiB, release_threshold: 0}\n");
  const std::vector<std::string> notices = config_notices(config);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].rfind("pools[2] ('gpu1').release_threshold: 0 has no effect", 0), 0u)
      << notices[0];
  EXPECT_TRUE(config_notices(embedded_default_config()).empty());

  // --check-config says it too, and passes.
  std::ofstream(path) << "pools:\n  - {name: host, device: host, size: 64MiB, release_threshold: "
                         "1MiB}\n";
  const auto checked = run_gpumemd("--check-config --config '" + path + "' 2>&1");
  EXPECT_EQ(checked.exit_status, 0) << checked.output;
  EXPECT_NE(checked.output.find("pools[0] ('host').release_threshold: 1MiB has no effect"),
            std::string::npos)
      << checked.output;
}

TEST_F(ConfigFile, EmptyFileOrNoPoolsMeansTheDefaultPools) {
  EXPECT_EQ(load("").pools.size(), 1u);
  EXPECT_EQ(load("log_level: warn\n").pools.at(0).name, "host");
}

TEST_F(ConfigFile, ErrorsNameTheKeyAndTheProblem) {
  EXPECT_NE(error_of("colour: blue\n").find("unknown key 'colour'"), std::string::npos);
  EXPECT_NE(error_of("pools:\n  - {name: a, device: host, size: 12XB}\n").find("pools[0]"),
            std::string::npos);
  EXPECT_NE(error_of("pools:\n  - {name: a, device: gpu, size: 1MiB}\n").find("not a device"),
            std::string::npos);
  EXPECT_NE(error_of("pools:\n  - {name: 'a b', device: host, size: 1MiB}\n").find("valid name"),
            std::string::npos);
  EXPECT_NE(error_of("pools:\n  - {name: a, device: host, size: 1MiB}\n  - {name: a, device: host, "
                     "size: 1MiB}\n")
                .find("duplicate pool name"),
            std::string::npos);
  EXPECT_NE(error_of("pools:\n  - {name: a, device: host}\n").find("missing 'size'"),
            std::string::npos);
  EXPECT_NE(error_of("socket_mode: rw\n").find("octal"), std::string::npos);
  EXPECT_NE(error_of("pools: [").find(path), std::string::npos);
}

TEST_F(ConfigFile, ReadsAccessAndQuotasWithNamesOrNumbers) {
  const auto config = load(R"(
access:
  connect_users: [root, 1002]
  connect_groups: [0]
  admin_group: root
  default_mode: "0640"
quotas:
  uid:1001: {bytes: 8GiB}
  user:root: {connections: unlimited, sync_objects: 9}
  group:root: {allocations: 10}
  client: {allocations: 5}
)");
  EXPECT_EQ(config.access.connect_users, (std::vector<uid_t>{0, 1002}));
  EXPECT_EQ(config.access.connect_groups, (std::vector<gid_t>{0}));
  EXPECT_EQ(config.access.admin_group, std::optional<gid_t>(0));
  EXPECT_EQ(config.access.default_mode, 0640u);
  // The embedded default entry stays when the file gives none.
  EXPECT_EQ(config.quotas.per_uid.allocations, std::optional<std::uint64_t>(100000));
  EXPECT_EQ(config.quotas.uids.at(1001).bytes, std::optional<std::uint64_t>(8ull << 30));
  EXPECT_FALSE(config.quotas.uids.at(0).connections) << "unlimited";
  EXPECT_EQ(config.quotas.uids.at(0).sync_objects, std::optional<std::uint64_t>(9));
  EXPECT_EQ(config.quotas.gids.at(0).allocations, std::optional<std::uint64_t>(10));
  EXPECT_EQ(config.quotas.per_client.allocations, std::optional<std::uint64_t>(5));
  EXPECT_EQ(load("open_across_users: true\n").access.default_mode, 0666u);
}

TEST_F(ConfigFile, AccessAndQuotaErrorsNameTheKey) {
  const auto names = [&](const std::string& text, const std::string& key) {
    return error_of(text).find(path + ": " + key + ": ") != std::string::npos;
  };
  EXPECT_TRUE(names("access: {connect_users: [no-such-user-here]}\n", "access.connect_users[0]"));
  EXPECT_TRUE(names("access: {admin_group: no-such-group-here}\n", "access.admin_group"));
  EXPECT_TRUE(names("access: {default_mode: rw}\n", "access.default_mode"));
  EXPECT_TRUE(names("quotas: {uid:abc: {bytes: 1GiB}}\n", "quotas.uid:abc"));
  EXPECT_TRUE(names("quotas: {team: {bytes: 1GiB}}\n", "quotas.team"));
  EXPECT_TRUE(names("quotas: {default: {bytes: lots}}\n", "quotas.default.bytes"));
  EXPECT_TRUE(names("quotas: {default: {allocations: 1.5}}\n", "quotas.default.allocations"));
  EXPECT_TRUE(
      names("quotas: {uid:0: {bytes: 1GiB}, user:root: {bytes: 2GiB}}\n", "quotas.user:root"));
  EXPECT_NE(error_of("quotas: {default: {colour: blue}}\n").find("unknown key 'colour'"),
            std::string::npos);
}

TEST_F(ConfigFile, ErrorsNameTheFileAndThePathOfTheKey) {
  const auto names = [&](const std::string& text, const std::string& key) {
    return error_of(text).find(path + ": " + key + ": ") != std::string::npos;
  };
  EXPECT_TRUE(names("max_output_bytes: 12XB\n", "max_output_bytes"));
  EXPECT_TRUE(names("log_level: loud\n", "log_level"));
  EXPECT_TRUE(names("open_across_users: maybe\n", "open_across_users"));
  EXPECT_TRUE(names("socket: [a, b]\n", "socket"));
  EXPECT_TRUE(names("pools:\n  - {name: a, device: host, size: 0}\n", "pools[0].size"));
  EXPECT_TRUE(names("pools:\n  - {name: a, device: 0, size: 1MiB, peer_access: [host]}\n",
                    "pools[0].peer_access"));
  EXPECT_NE(error_of("pools:\n  - {name: a, device: host, size: 1MiB, colour: blue}\n")
                .find(path + ": pools[0]: unknown key 'colour'"),
            std::string::npos);
}

/// A file gpumemd must refuse, the key its error names and the reason it gives.
struct refused_file {
  const char* text;
  const char* key;
  const char* reason;
};

// Each of these once passed, or failed without naming the key: values that leave the daemon
// unable to serve, values yaml-cpp cannot convert, keys YAML would silently drop, and pools
// that cannot work on this machine.
constexpr refused_file kRefusedFiles[] = {
    {"max_output_bytes: 0\n", "max_output_bytes", "0 is below the minimum of 256KiB"},
    {"max_output_bytes: 64KiB\n", "max_output_bytes", "64KiB is below the minimum of 256KiB"},
    {"frame_deadline: 1ms\n", "frame_deadline", "1ms is below the minimum of 100ms"},
    {"max_connections: 0\n", "max_connections", "not a whole number above 0"},
    {"open_across_users: maybe\n", "open_across_users", "'maybe' is not true or false"},
    {"pools:\n  - {name: a, device: host, size: [1]}\n", "pools[0].size", "is a single value"},
    {"pools:\n  - {name: a, device: host, size: 12XB}\n", "pools[0].size", "'12XB' is not a size"},
    {"pools:\n  - {name: a, device: host, size: 100}\n", "pools[0].size",
     "100 is below the minimum of 4KiB"},
    {"pools: []\n", "pools", "lists no pool"},
    {"log_level: info\nlog_level: warn\n", "log_level", "is given twice"},
    {"pools:\n  - {name: a, device: host, size: 1MiB, size: 2MiB}\n", "pools[0].size",
     "is given twice"},
    {"quotas:\n  default: {bytes: 1GiB}\n  default: {bytes: 2GiB}\n", "quotas.default",
     "is given twice"},
    {"pools:\n  - {name: a, device: 0, size: 1GiB, release_threshold: 2GiB}\n",
     "pools[0].release_threshold", "2GiB is above the pool's size (1GiB)"},
    {"pools:\n  - {name: a, device: host, size: 1024TiB}\n", "pools[0].size",
     "1024TiB is more than this machine's memory"},
};

TEST_F(ConfigFile, RefusesEachBadFileNamingTheFileTheKeyAndTheReason) {
  for (const auto& [text, key, reason] : kRefusedFiles) {
    const std::string error = error_of(text);
    EXPECT_NE(error.find(path + ": " + key + ": "), std::string::npos) << text << error;
    EXPECT_NE(error.find(reason), std::string::npos) << text << error;
    // The path is said once: an error from a nested read is not wrapped a second time.
    EXPECT_EQ(error.find(path, 1), std::string::npos) << error;
    EXPECT_EQ(error.find("bad conversion"), std::string::npos) << error;
  }
}

TEST_F(ConfigFile, CheckConfigRefusesEachBadFileWithStatusTwo) {
  for (const auto& [text, key, reason] : kRefusedFiles) {
    std::ofstream(path) << text;
    const auto checked = run_gpumemd("--check-config --config '" + path + "' 2>&1");
    EXPECT_EQ(checked.exit_status, 2) << text << checked.output;
    EXPECT_NE(checked.output.find(path + ": " + key + ": "), std::string::npos)
        << text << checked.output;
  }
}

TEST_F(ConfigFile, AMissingFileIsAConfigurationErrorWithStatusTwo) {
  const auto missing = run_gpumemd("--check-config --config '" + path + ".missing' 2>&1");
  EXPECT_EQ(missing.exit_status, 2) << missing.output;
  EXPECT_NE(missing.output.find(path + ".missing: cannot be read: No such file or directory"),
            std::string::npos)
      << missing.output;
  const auto folder = run_gpumemd("--check-config --config '" + ::testing::TempDir() + "' 2>&1");
  EXPECT_EQ(folder.exit_status, 2) << folder.output;
  EXPECT_NE(folder.output.find("is a folder, not a file"), std::string::npos) << folder.output;
}

TEST_F(ConfigFile, CheckConfigChecksTheCudaDevicesItNamesOrSaysItCouldNot) {
  std::ofstream(path) << "pools:\n  - {name: far, device: 7, size: 1GiB}\n";
  const auto checked = run_gpumemd("--check-config --config '" + path + "' 2>&1");
  if (checked.output.find("built without the CUDA backend") != std::string::npos) {
    // A build without CUDA (the sanitizer builds) refuses any CUDA pool, naming it.
    EXPECT_EQ(checked.exit_status, 2) << checked.output;
    EXPECT_NE(checked.output.find(path + ": pools[0].device: "), std::string::npos)
        << checked.output;
  } else if (checked.output.find("not checked: no CUDA driver") != std::string::npos) {
    // No driver here to ask: the rest is valid, so it passes, saying what it could not check.
    EXPECT_EQ(checked.exit_status, 0) << checked.output;
    EXPECT_NE(checked.output.find("pools[0].device: CUDA device 7 not checked"), std::string::npos)
        << checked.output;
  } else {
    EXPECT_EQ(checked.exit_status, 2) << checked.output;
    EXPECT_NE(checked.output.find(path + ": pools[0].device: CUDA device 7 does not exist"),
              std::string::npos)
        << checked.output;
  }
}

TEST_F(ConfigFile, CheckConfigExitsWithStatusTwoNamingTheFileAndTheKey) {
  std::ofstream(path) << "max_output_bytes: lots\n";
  const auto checked = run_gpumemd("--check-config --config '" + path + "' 2>&1");
  EXPECT_EQ(checked.exit_status, 2);
  EXPECT_NE(checked.output.find(path + ": max_output_bytes: 'lots' is not a size"),
            std::string::npos)
      << checked.output;
}

TEST(CommandLine, OptionsOverrideTheFileThroughTheSameChecks) {
  daemon_config config = embedded_default_config();
  set_key(config, "socket_mode", "0660", "--socket-mode");
  set_key(config, "socket", "/run/gpumemd/gpumemd.sock", "--socket");
  EXPECT_EQ(config.socket_mode, 0660u);
  EXPECT_EQ(config.socket_path, "/run/gpumemd/gpumemd.sock");
  const auto bad_mode = run_gpumemd("--check-config --socket-mode 0999 2>&1");
  EXPECT_EQ(bad_mode.exit_status, 2);
  EXPECT_NE(bad_mode.output.find("--socket-mode"), std::string::npos) << bad_mode.output;
  const auto bad_level = run_gpumemd("--check-config --log-level loud 2>&1");
  EXPECT_EQ(bad_level.exit_status, 2);
  EXPECT_NE(bad_level.output.find("--log-level: 'loud' is not a log level"), std::string::npos)
      << bad_level.output;
}

TEST(CommandLine, VersionPrintsTheReleaseTheProtocolAndTheCudaBackend) {
  const auto version = run_gpumemd("--version");
  EXPECT_EQ(version.exit_status, 0);
  EXPECT_EQ(version.output.rfind(std::string("gpumemd ") + gpumem::kVersion + "\n", 0), 0u)
      << version.output;
  EXPECT_NE(version.output.find("protocol version " + std::to_string(proto::kProtocolVersion)),
            std::string::npos)
      << version.output;
  EXPECT_NE(version.output.find("CUDA backend: "), std::string::npos) << version.output;
}

pool_config pool(const std::string& name, std::uint64_t size) {
  return {.name = name,
          .device = proto::kHostDevice,
          .size = size,
          .release_threshold = size,
          .peer_access = {}};
}

TEST(ReloadPlan, TakesTheLiveKeysAndKeepsTheSocketPathForARestart) {
  daemon_config running = embedded_default_config();
  daemon_config wanted = running;
  wanted.log_level = "debug";
  wanted.socket_mode = 0660;
  wanted.max_output_bytes = 8u << 20;
  wanted.quotas.per_uid.allocations = 2;
  wanted.socket_path = "/elsewhere.sock";
  const reload_plan plan = plan_reload(running, wanted);
  EXPECT_EQ(plan.next.log_level, "debug");
  EXPECT_EQ(plan.next.socket_mode, 0660u);
  EXPECT_EQ(plan.next.max_output_bytes, 8u << 20);
  EXPECT_EQ(plan.next.quotas, wanted.quotas);
  EXPECT_EQ(plan.next.socket_path, running.socket_path);
  EXPECT_EQ(plan.changes,
            (std::vector<std::string>{"log_level info -> debug", "socket_mode 0600 -> 0660",
                                      "quotas", "max_output_bytes 4194304 -> 8388608"}));
  ASSERT_EQ(plan.not_applied.size(), 1u);
  EXPECT_EQ(plan.not_applied[0].rfind("socket: '' -> '/elsewhere.sock' cannot change", 0), 0u)
      << plan.not_applied[0];
}

TEST(ReloadPlan, AddsNewPoolsAndKeepsChangedAndRemovedOnesForARestart) {
  daemon_config running = embedded_default_config();
  running.pools = {pool("host", 1u << 30), pool("gone", 1u << 20)};
  daemon_config wanted = running;
  wanted.pools = {pool("host", 2u << 30), pool("extra", 1u << 20)};
  const reload_plan plan = plan_reload(running, wanted);
  EXPECT_TRUE(plan.changes.empty());
  ASSERT_EQ(plan.new_pools.size(), 1u);
  EXPECT_EQ(plan.new_pools[0].name, "extra");
  // The running pools as they are, the new one after them.
  ASSERT_EQ(plan.next.pools.size(), 3u);
  EXPECT_EQ(plan.next.pools[0], running.pools[0]);
  EXPECT_EQ(plan.next.pools[1], running.pools[1]);
  EXPECT_EQ(plan.next.pools[2].name, "extra");
  ASSERT_EQ(plan.not_applied.size(), 2u);
  EXPECT_NE(
      plan.not_applied[0].find("pool 'host' (size 1073741824 -> 2147483648, release_threshold"),
      std::string::npos)
      << plan.not_applied[0];
  EXPECT_NE(plan.not_applied[1].find("pool 'gone' is no longer configured but stays"),
            std::string::npos)
      << plan.not_applied[1];
}

TEST(ReloadPlan, AnUnchangedConfigurationChangesNothing) {
  const daemon_config running = embedded_default_config();
  const reload_plan plan = plan_reload(running, running);
  EXPECT_EQ(plan.next, running);
  EXPECT_TRUE(plan.changes.empty());
  EXPECT_TRUE(plan.not_applied.empty());
  EXPECT_TRUE(plan.new_pools.empty());
}

}  // namespace
}  // namespace gpumem::daemon
