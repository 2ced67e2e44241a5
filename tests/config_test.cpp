#include "config/config.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

namespace gpumem::daemon {
namespace {

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
  EXPECT_TRUE(config.open_across_users);
  EXPECT_EQ(config.max_output_bytes, 1u << 20);
  ASSERT_EQ(config.pools.size(), 2u);
  EXPECT_EQ(config.pools[1].device, 0);
  EXPECT_EQ(config.pools[1].release_threshold, 1u << 30);
  EXPECT_EQ(config.pools[1].peer_access, (std::vector<std::int32_t>{1, 2}));
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

}  // namespace
}  // namespace gpumem::daemon
