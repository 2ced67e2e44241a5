// gpumem_soak: many client processes against one gpumemd for a while, SIGKILLed at random,
// then checks that the daemon is alive, leaked nothing and is back to its size (driver.hpp).
// `gpumem_soak worker ...` is one client process (worker.hpp), started by the driver.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <climits>

#include "driver.hpp"
#include "worker.hpp"

int main(int argc, char** argv) {
  CLI::App app{"gpumem_soak: SIGKILLed clients against one gpumemd, then leak and hang checks"};
  gpumem::soak::soak_options soak;
  unsigned seconds = 60;
  unsigned kill_interval_ms = 500;
  unsigned hang_seconds = 10;
  app.add_option("-t,--seconds", seconds, "how long the whole run takes (warm-up included)")
      ->check(CLI::Range(10u, 86400u));
  app.add_option("-n,--clients", soak.clients, "client processes at any time")
      ->check(CLI::Range(1u, 256u));
  app.add_option("--kill-interval-ms", kill_interval_ms, "one SIGKILL every so often")
      ->check(CLI::Range(10u, 60000u));
  app.add_option("--seed", soak.seed, "seed of every random choice");
  app.add_option("--hang-seconds", hang_seconds, "a client silent this long is hung");
  app.add_option("--rss-tolerance-kib", soak.rss_tolerance_kib,
                 "growth of the daemon's RSS allowed after warm-up");
  app.add_option("--fd-tolerance", soak.fd_tolerance,
                 "growth of the daemon's descriptor count allowed after warm-up");
  gpumem::soak::worker_options worker;
  CLI::App* worker_mode = app.add_subcommand("worker", "one client process (the driver starts it)");
  worker_mode->add_option("--socket", worker.socket_path)->required();
  worker_mode->add_option("--seed", worker.seed);
  CLI11_PARSE(app, argc, argv);

  if (*worker_mode) return gpumem::soak::run_worker(worker);
  char self[PATH_MAX] = {};
  if (::readlink("/proc/self/exe", self, sizeof self - 1) <= 0) return 2;
  soak.worker_binary = self;
  soak.duration = std::chrono::seconds(seconds);
  soak.kill_interval = std::chrono::milliseconds(kill_interval_ms);
  soak.hang_after = std::chrono::seconds(hang_seconds);
  return gpumem::soak::run_soak(soak);
}
