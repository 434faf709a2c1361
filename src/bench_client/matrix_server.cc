// bench_client: child processes of `bench matrix` (see matrix_server.h).
#include "bench_client/matrix_server.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <httplib.h>

#include "core/mmap_file.h"

extern char** environ;

namespace qs::bench {
namespace {

// The children the signal handler must kill; a slot holds a pid or 0. Lock-free atomics are
// what a signal handler may read.
constexpr int kMaxChildren = 8;
std::atomic<pid_t> g_children[kMaxChildren];

void track(pid_t pid) {
  for (auto& slot : g_children) {
    pid_t empty = 0;
    if (slot.compare_exchange_strong(empty, pid)) return;
  }
  QS_CHECK_MSG(false, "more than kMaxChildren children at once");
}

void untrack(pid_t pid) {
  for (auto& slot : g_children) {
    pid_t want = pid;
    slot.compare_exchange_strong(want, 0);
  }
}

// The child leads its own process group (pgid = pid), so the group dies with it.
void kill_group(pid_t pid, int sig) {
  if (pid <= 0) return;  // kill(0) or kill(-1) would reach far more than the child
  kill(-pid, sig);
  kill(pid, sig);
}

void on_fatal_signal(int sig) {
  for (auto& slot : g_children) {
    const pid_t pid = slot.load();
    if (pid > 0) kill_group(pid, SIGKILL);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

// "0.5", "600": seconds as the user wrote them.
std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// A log as far as the child has written it; "" when it cannot be read (yet).
std::string slurp(const std::string& path) {
  Result<std::string> text = read_file(path);
  return text.ok() ? *text : std::string();
}

ChildExit exit_of(int status) {
  ChildExit e;
  e.exited = WIFEXITED(status);
  e.code = e.exited ? WEXITSTATUS(status) : 0;
  e.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return e;
}

// fork + execve with stdout/stderr into `log_path`. Everything the child needs is built
// before fork(): between fork and exec it makes only async-signal-safe calls.
Result<pid_t> spawn(const std::vector<std::string>& argv, const std::string& log_path,
                    const std::vector<std::string>& env) {
  QS_CHECK(!argv.empty());
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string key = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const std::string& o : env) overridden |= o.substr(0, o.find('=')) == key;
    if (!overridden) env_strings.push_back(entry);
  }
  for (const std::string& o : env) env_strings.push_back(o);
  std::vector<char*> envp;
  for (const std::string& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) return io_error("cannot write " + log_path + ": " + std::strerror(errno));
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    if (null_fd >= 0) close(null_fd);
    return io_error(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    execve(args[0], args.data(), envp.data());
    const char msg[] = "bench matrix: execve failed\n";
    ssize_t ignored = write(2, msg, sizeof(msg) - 1);
    (void)ignored;
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so a kill of the group right after fork finds it
  track(pid);
  close(log_fd);
  if (null_fd >= 0) close(null_fd);
  return pid;
}

// Waits at most `timeout_s`; on time-out SIGKILLs the group and reaps. `*timed_out` says which.
ChildExit wait_with_deadline(pid_t pid, double timeout_s, bool* timed_out) {
  const double deadline = now_s() + timeout_s;
  *timed_out = false;
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) break;
    if (now_s() > deadline) {
      *timed_out = true;
      kill_group(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  untrack(pid);
  return exit_of(status);
}

}  // namespace

void install_child_reaper() {
  signal(SIGINT, on_fatal_signal);
  signal(SIGTERM, on_fatal_signal);
}

std::string ChildExit::describe() const {
  if (exited) return "exit code " + std::to_string(code);
  return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
}

std::string tail_lines(const std::string& path, int n_lines) {
  std::vector<std::string> lines;
  std::istringstream in(slurp(path));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string out;
  const size_t first = lines.size() > static_cast<size_t>(n_lines) ? lines.size() - n_lines : 0;
  for (size_t i = first; i < lines.size(); ++i)
    out += lines[i] + (i + 1 < lines.size() ? "\n" : "");
  return out;
}

Status run_child_to_completion(const std::vector<std::string>& argv, const std::string& log_path,
                               double timeout_s, const std::vector<std::string>& env) {
  QS_ASSIGN_OR_RETURN(pid_t pid, spawn(argv, log_path, env));
  bool timed_out = false;
  const ChildExit e = wait_with_deadline(pid, timeout_s, &timed_out);
  if (timed_out) {
    return internal_error("did not finish within " + seconds(timeout_s) +
                          " s (killed); last lines of " + log_path + ":\n" +
                          tail_lines(log_path, 5));
  }
  if (!e.ok()) {
    return internal_error("ended with " + e.describe() + "; last lines of " + log_path + ":\n" +
                          tail_lines(log_path, 5));
  }
  return ok_status();
}

std::optional<KvCacheInfo> parse_kv_cache_line(const std::string& log_text) {
  static const std::regex re(
      R"(KV cache \(([^,]+), [^)]+\) ([0-9]+) blocks x ([0-9]+) tokens = ([0-9]+) tokens \(([0-9.]+) MiB\))");
  std::smatch m;
  if (!std::regex_search(log_text, m, re)) return std::nullopt;
  KvCacheInfo kv;
  kv.dtype = m[1];
  kv.n_blocks = std::stoll(m[2]);
  kv.block_size = std::stoll(m[3]);
  kv.tokens = std::stoll(m[4]);
  kv.mib = std::stod(m[5]);
  return kv;
}

Result<std::unique_ptr<ServerProcess>> ServerProcess::start(
    const std::vector<std::string>& serve_args, const std::string& log_path,
    double startup_timeout_s) {
  std::vector<std::string> argv = {"/proc/self/exe", "serve"};
  argv.insert(argv.end(), serve_args.begin(), serve_args.end());
  const double t0 = now_s();
  // The port and the KV-cache line are info-level log lines: on whatever the caller's level.
  QS_ASSIGN_OR_RETURN(pid_t pid, spawn(argv, log_path, {"QS_LOG_LEVEL=info"}));
  std::unique_ptr<ServerProcess> s(new ServerProcess());
  s->pid_ = pid;
  s->log_path_ = log_path;
  static const std::regex port_re(R"(serving .* on http://[^ ]+:([0-9]+) \()");
  const auto failed = [&](const std::string& why) {
    return internal_error("server " + why + "; last lines of " + log_path + ":\n" +
                          tail_lines(log_path, 6));
  };
  for (;;) {
    if (std::optional<ChildExit> e = s->exited()) {
      return failed("exited (" + e->describe() + ") before it was ready");
    }
    if (now_s() - t0 > startup_timeout_s) {
      s->stop(0);
      return failed("was not ready within " + seconds(startup_timeout_s) + " s (killed)");
    }
    if (s->port_ == 0) {
      std::smatch m;
      const std::string text = slurp(log_path);
      if (std::regex_search(text, m, port_re)) s->port_ = std::stoi(m[1]);
    }
    if (s->port_ != 0) {
      httplib::Client client("127.0.0.1", s->port_);
      client.set_connection_timeout(1, 0);
      client.set_read_timeout(5, 0);
      if (auto res = client.Get("/health"); res && res->status == 200) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  s->startup_s_ = now_s() - t0;
  s->kv_cache_ = parse_kv_cache_line(slurp(log_path));
  return s;
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0 && !exit_) stop(0);
}

std::optional<ChildExit> ServerProcess::exited() {
  if (exit_) return exit_;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    untrack(pid_);
    exit_ = exit_of(status);
  }
  return exit_;
}

Result<int64_t> ServerProcess::peak_rss_bytes() const {
  const std::string path = "/proc/" + std::to_string(pid_) + "/status";
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // "NNN kB"
  }
  return not_found("no VmHWM in " + path);
}

Result<double> ServerProcess::metric(const std::string& name) const {
  httplib::Client client("127.0.0.1", port_);
  client.set_connection_timeout(2, 0);
  client.set_read_timeout(10, 0);
  auto res = client.Get("/metrics");
  if (!res || res->status != 200) return io_error("GET /metrics failed on " + base_url());
  std::istringstream in(res->body);
  std::string line;
  bool found = false;
  double sum = 0;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) != 0 || line.size() <= name.size()) continue;
    const char next = line[name.size()];
    if (next != '{' && next != ' ') continue;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
    found = true;
  }
  if (!found) return not_found("/metrics has no " + name);
  return sum;
}

void ServerProcess::kill_now() {
  if (pid_ > 0) kill_group(pid_, SIGKILL);
}

ChildExit ServerProcess::stop(double grace_s) {
  if (std::optional<ChildExit> e = exited()) return *e;
  kill(pid_, SIGTERM);
  bool timed_out = false;
  exit_ = wait_with_deadline(pid_, grace_s, &timed_out);
  return *exit_;
}

}  // namespace qs::bench
