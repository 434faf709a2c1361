// apps: the engine replicas of `serve --data-parallel-size N` as child processes: each is this
// binary's own `quantserve serve` with the same flags, less the data-parallel ones, on a free
// port. Its log comes through a pipe, forwarded line by line under a "[replica i]" prefix, and
// its "serving ... on http://HOST:PORT" line tells the port it bound. A child dies with its
// parent (PR_SET_PDEATHSIG) and sits in its own process group, so that a terminal's Ctrl-C
// reaches only the front end, which stops the replicas in order.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "apps/flags.h"
#include "core/status.h"

namespace qs::apps {

// `serve` arguments for a replica: this process's own (from /proc/self/cmdline, as the flags
// were given) without the model, --data-parallel-*, --host, --port and --threads, then
// `dir`, --host `host`, --port 0, --threads `threads`, and --served-model-name when the front
// was not given one (the replicas must answer to the name the front would).
Result<std::vector<std::string>> replica_serve_args(const Flags& flags, const std::string& dir,
                                                    const std::string& host, int threads);

class ReplicaProcess {
 public:
  // Starts `/proc/self/exe args...` with an empty signal mask and default dispositions.
  // `scrub_mpi_env`: without the MPI launcher's variables, so that a replica started by an
  // mpirun rank does not take itself for a rank.
  static Result<std::unique_ptr<ReplicaProcess>> spawn(int index,
                                                       const std::vector<std::string>& args,
                                                       bool scrub_mpi_env);
  // Stops the process if it still runs (stop()), then joins the log reader.
  ~ReplicaProcess();
  ReplicaProcess(const ReplicaProcess&) = delete;
  ReplicaProcess& operator=(const ReplicaProcess&) = delete;

  // The port from the replica's "serving" log line; an error naming the exit if the process
  // ends first, or if `timeout` passes.
  Result<int> wait_for_port(std::chrono::seconds timeout);
  // Whether the process has ended (reaped here); thread-safe, never blocks.
  bool exited();
  // "exited with status 1", "killed by signal 9", or "running".
  std::string exit_description();
  // SIGTERM if it still runs.
  void terminate();
  // SIGTERM, up to `grace` for it to exit, then SIGKILL; returns once it is reaped.
  void stop(std::chrono::milliseconds grace);

  pid_t pid() const { return pid_; }
  int index() const { return index_; }

 private:
  ReplicaProcess(int index, pid_t pid, int log_fd);
  void forward_log();

  const int index_;
  const pid_t pid_;
  const int log_fd_;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  int port_ = 0;             // from the log; 0 until seen
  bool log_closed_ = false;  // the pipe reached EOF
  bool reaped_ = false;
  int wait_status_ = 0;
};

}  // namespace qs::apps
