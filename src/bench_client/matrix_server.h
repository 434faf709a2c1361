// bench_client: the child processes of `quantserve bench matrix`: one `quantserve serve` per scheme
// x KV budget, and the commands that make its checkpoints. Every child runs in its own process
// group, dies with this process (PR_SET_PDEATHSIG) and is listed where a SIGINT / SIGTERM
// handler kills it, so none outlives the benchmark however it ends; every wait has a deadline.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace qs::bench {

// SIGINT and SIGTERM kill (SIGKILL) every child still running, then end this process with
// the signal's default action. Call once, before the first child starts.
void install_child_reaper();

// How a child ended.
struct ChildExit {
  bool exited = false;  // exit(code); otherwise killed by `signal`
  int code = 0;
  int signal = 0;
  bool ok() const { return exited && code == 0; }
  std::string describe() const;  // "exit code 1", "killed by signal 9 (Killed)"
};

// The last `n_lines` lines of a text file ("" when it cannot be read).
std::string tail_lines(const std::string& path, int n_lines);

// Runs argv (argv[0] a path; "/proc/self/exe" is this binary) with stdout and stderr into
// `log_path`, `env` added to the environment, and waits at most `timeout_s` (then SIGKILL).
// Not ok when it cannot start, times out or does not exit 0; the message quotes the log's tail.
Status run_child_to_completion(const std::vector<std::string>& argv, const std::string& log_path,
                               double timeout_s, const std::vector<std::string>& env = {});

// The engine's startup line "engine: KV cache (auto, bf16) 170 blocks x 16 tokens = 2720
// tokens (31.9 MiB); ..." as numbers.
struct KvCacheInfo {
  std::string dtype;  // as the engine names it: "bf16", "fp8_e4m3"
  int64_t n_blocks = 0;
  int64_t block_size = 0;
  int64_t tokens = 0;
  double mib = 0;
};
std::optional<KvCacheInfo> parse_kv_cache_line(const std::string& log_text);

// A `quantserve serve` child: started, waited for until /health answers 200, stopped with
// SIGTERM (SIGKILL after a grace period). The destructor kills it if it still runs.
class ServerProcess {
 public:
  // `serve_args` follow `quantserve serve`; they must include --port (0: any free port; the
  // port is read from the server's "serving ... on http://HOST:PORT" line).
  static Result<std::unique_ptr<ServerProcess>> start(const std::vector<std::string>& serve_args,
                                                      const std::string& log_path,
                                                      double startup_timeout_s);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& log_path() const { return log_path_; }
  double startup_s() const { return startup_s_; }
  const std::optional<KvCacheInfo>& kv_cache() const { return kv_cache_; }

  // How it ended, once it has (reaped here); nullopt while it runs.
  std::optional<ChildExit> exited();
  // VmHWM of /proc/PID/status: the most resident memory it has had.
  Result<int64_t> peak_rss_bytes() const;
  // A counter or gauge of GET /metrics (the sum over its label sets), e.g.
  // "vllm:num_preemptions_total".
  Result<double> metric(const std::string& name) const;
  // SIGKILL now (a watchdog's last resort); safe from another thread.
  void kill_now();
  // SIGTERM, then SIGKILL after `grace_s`; how it ended.
  ChildExit stop(double grace_s);

 private:
  ServerProcess() = default;

  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
  double startup_s_ = 0;
  std::optional<KvCacheInfo> kv_cache_;
  std::optional<ChildExit> exit_;
};

}  // namespace qs::bench
