// apps: data-parallel replicas as child processes (see serve_data_parallel_replicas.h).
#include "apps/serve_data_parallel_replicas.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>

extern char** environ;

namespace qs::apps {
namespace {

// The flags the front end owns or sets itself for each replica.
const std::set<std::string> kFrontFlags = {
    "model", "data-parallel-size", "data-parallel-routing", "host", "port", "threads"};

Result<std::vector<std::string>> own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return io_error("cannot read /proc/self/cmdline");
  std::vector<std::string> args;
  size_t start = 0;
  while (start < all.size()) {
    const size_t end = all.find('\0', start);
    args.push_back(all.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return args;
}

// Flags does not say which flags are booleans; a boolean refuses a value other than
// true/false, which a copy of the parsed flags reveals without touching them.
bool is_bool_flag(const Flags& flags, const std::string& name) {
  Flags probe = flags;
  return !probe.parse({"--" + name + "=x"}).ok();
}

bool is_mpi_variable(const char* entry) {
  for (const char* prefix : {"OMPI_", "PMIX_", "PMI_", "OPAL_", "PRTE_", "HYDRA_", "MPI_"}) {
    if (std::strncmp(entry, prefix, std::strlen(prefix)) == 0) return true;
  }
  return false;
}

// "[quantserve info] serving DIR as 'NAME' on http://HOST:PORT (...)" -> PORT, else 0.
int port_of_serving_line(const std::string& line) {
  if (line.find("] serving ") == std::string::npos) return 0;
  const std::string marker = " on http://";
  const size_t at = line.find(marker);
  if (at == std::string::npos) return 0;
  const size_t begin = at + marker.size();
  const size_t end = line.find(' ', begin);
  const std::string address = line.substr(begin, end == std::string::npos ? end : end - begin);
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return 0;
  const std::string digits = address.substr(colon + 1);
  if (digits.empty() || digits.size() > 5 || digits.find_first_not_of("0123456789") != digits.npos)
    return 0;
  const int port = std::stoi(digits);
  return port > 0 && port <= 65535 ? port : 0;
}

}  // namespace

Result<std::vector<std::string>> replica_serve_args(const Flags& flags, const std::string& dir,
                                                    const std::string& host, int threads) {
  QS_ASSIGN_OR_RETURN(std::vector<std::string> argv, own_command_line());
  if (argv.size() < 2 || argv[1] != "serve") {
    return invalid_argument(
        "--data-parallel-size needs this process's own `quantserve serve` command line to start "
        "its replicas");
  }
  std::vector<std::string> out = {"serve", dir};
  for (size_t i = 2; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0 || a == "--") continue;  // the model, as a positional
    std::string name = a.substr(2);
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) name = name.substr(0, eq);
    const bool takes_next = !inline_value && !is_bool_flag(flags, name) && i + 1 < argv.size();
    const bool keep = !kFrontFlags.count(name);
    if (keep) out.push_back(a);
    if (takes_next) {
      ++i;
      if (keep) out.push_back(argv[i]);
    }
  }
  if (!flags.has("served-model-name")) {
    out.push_back("--served-model-name");
    out.push_back(flags.positionals().empty() ? flags.get("model") : flags.positionals()[0]);
  }
  for (const std::string& s : {std::string("--host"), host, std::string("--port"), std::string("0"),
                               std::string("--threads"), std::to_string(threads)})
    out.push_back(s);
  return out;
}

Result<std::unique_ptr<ReplicaProcess>> ReplicaProcess::spawn(int index,
                                                              const std::vector<std::string>& args,
                                                              bool scrub_mpi_env) {
  char exe[PATH_MAX];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (len <= 0) return io_error(std::string("cannot find this binary: ") + std::strerror(errno));
  exe[len] = '\0';
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<std::string> argv_s = {exe};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!scrub_mpi_env || !is_mpi_variable(*e)) envp.push_back(*e);
  }
  envp.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return io_error(std::string("replica log pipe: ") + std::strerror(errno));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(fds[0]);
    close(fds[1]);
    return io_error(std::string("cannot start a replica: fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // the front died before prctl took effect
    dup2(fds[1], STDERR_FILENO);
    // The front blocks SIGINT/SIGTERM for its sigwait thread and ignores SIGPIPE; a blocked
    // mask and ignored dispositions would survive exec and leave the replica deaf to both.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(fds[1]);
  return std::unique_ptr<ReplicaProcess>(new ReplicaProcess(index, pid, fds[0]));
}

ReplicaProcess::ReplicaProcess(int index, pid_t pid, int log_fd)
    : index_(index), pid_(pid), log_fd_(log_fd) {
  reader_ = std::thread([this] { forward_log(); });
}

ReplicaProcess::~ReplicaProcess() {
  stop(std::chrono::seconds(5));
  if (reader_.joinable()) reader_.join();
  close(log_fd_);
}

void ReplicaProcess::forward_log() {
  std::string pending;
  char buf[4096];
  auto line = [this](std::string text) {
    bool first_port = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (port_ == 0) {
        port_ = port_of_serving_line(text);
        first_port = port_ != 0;
      }
    }
    if (first_port) {
      // Only the front end's own line may read "on http://": clients and scripts take the
      // first such line for the endpoint.
      text.replace(text.find(" on http://"), 11, " at ");
      cv_.notify_all();
    }
    // The front's health polls, once a second per replica, would drown the log; a failed
    // one is news and stays.
    if (text.find("\"GET /health HTTP/1.1\" 200 ") != std::string::npos) return;
    std::fprintf(stderr, "[replica %d] %s\n", index_, text.c_str());
  };
  for (;;) {
    const ssize_t n = read(log_fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      line(pending.substr(0, nl));
      pending.erase(0, nl + 1);
    }
  }
  if (!pending.empty()) line(pending);
  std::lock_guard<std::mutex> lock(mu_);
  log_closed_ = true;
  cv_.notify_all();
}

Result<int> ReplicaProcess::wait_for_port(std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, deadline, [this] { return port_ != 0 || log_closed_; });
    if (port_ != 0) return port_;
  }
  const std::string prefix =
      "replica " + std::to_string(index_) + " (pid " + std::to_string(pid_) + ") ";
  if (std::chrono::steady_clock::now() >= deadline) {
    return unavailable(prefix + "did not start serving within " + std::to_string(timeout.count()) +
                       " s");
  }
  // Its log ended: it is exiting. Give it a moment to be reaped, for the message.
  for (int i = 0; i < 100 && !exited(); ++i) usleep(20000);
  return unavailable(prefix + exit_description() + " before serving (its log is above)");
}

bool ReplicaProcess::exited() {
  std::lock_guard<std::mutex> lock(mu_);
  if (reaped_) return true;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_ || (r < 0 && errno == ECHILD)) {
    reaped_ = true;
    wait_status_ = r == pid_ ? status : 0;
  }
  return reaped_;
}

std::string ReplicaProcess::exit_description() {
  if (!exited()) return "running";
  std::lock_guard<std::mutex> lock(mu_);
  if (WIFSIGNALED(wait_status_)) {
    return "killed by signal " + std::to_string(WTERMSIG(wait_status_)) + " (" +
           strsignal(WTERMSIG(wait_status_)) + ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(wait_status_));
}

void ReplicaProcess::terminate() {
  if (!exited()) kill(pid_, SIGTERM);
}

void ReplicaProcess::stop(std::chrono::milliseconds grace) {
  if (exited()) return;
  kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (!exited() && std::chrono::steady_clock::now() < deadline) usleep(20000);
  if (exited()) return;
  kill(pid_, SIGKILL);
  while (!exited()) usleep(5000);
}

}  // namespace qs::apps
