// apps: data-parallel serving, the local and the mpirun mode (see serve_data_parallel.h).
#include "apps/serve_data_parallel.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "apps/sampling_flags.h"
#include "apps/serve_data_parallel_replicas.h"
#include "core/log.h"
#include "dist/communicator.h"
#include "models/model_config.h"
#include "server/dp_front.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace qs::apps {
namespace {

// A replica loads the model before it logs its port; a large checkpoint read from a slow disk
// takes minutes.
constexpr std::chrono::seconds kReplicaStartTimeout{900};
// SIGTERM'd replicas abort what they run and answer it; the front waits this long for those
// answers to pass before it closes, and each replica as long again before SIGKILL.
constexpr std::chrono::milliseconds kDrainTimeout{15000};
constexpr int kMaxReplicas = 64;

std::string model_arg(const Flags& flags) {
  return flags.positionals().empty() ? flags.get("model") : flags.positionals()[0];
}

// What the front needs to see a request's prompt as a replica will: the tokenizer, the chat
// template and the context length. Anything missing (a pipeline, an unusual checkpoint)
// leaves prefix routing off, with a warning, rather than failing the server.
struct FrontModel {
  std::unique_ptr<tok::Tokenizer> tokenizer;
  std::unique_ptr<tok::ChatTemplate> chat_template;
  server::ModelInfo info;
};

std::unique_ptr<FrontModel> load_front_model(const Flags& flags, const std::string& dir) {
  if (std::filesystem::exists(std::filesystem::path(dir) / "model_index.json")) return nullptr;
  auto m = std::make_unique<FrontModel>();
  Result<models::ModelConfig> config = models::load_model_config(dir);
  Result<std::unique_ptr<tok::Tokenizer>> tokenizer = tok::load_tokenizer(dir);
  if (!config.ok() || !tokenizer.ok()) {
    QS_LOG_WARN("data parallel: requests are routed by load only (%s)",
                (config.ok() ? tokenizer.status() : config.status()).message().c_str());
    return nullptr;
  }
  m->tokenizer = std::move(*tokenizer);
  Result<tok::ChatTemplate> chat =
      flags.has("chat-template")
          ? tok::ChatTemplate::from_file_or_string(flags.get("chat-template"))
          : tok::ChatTemplate::from_model_dir(dir);
  if (chat.ok()) m->chat_template = std::make_unique<tok::ChatTemplate>(std::move(*chat));
  server::ModelInfo& info = m->info;
  info.served_model_name =
      flags.has("served-model-name") ? flags.get("served-model-name") : model_arg(flags);
  info.root = dir;
  info.max_model_len = config->max_position_embeddings;
  if (flags.has("max-model-len")) {
    if (Result<int64_t> len = flags.get_int("max-model-len"); len.ok()) info.max_model_len = *len;
  }
  info.vocab_size = config->vocab_size;
  info.tokenizer = m->tokenizer.get();
  info.chat_template = m->chat_template.get();
  if (Result<int64_t> n = flags.get_int("max-logprobs"); n.ok()) {
    info.max_logprobs = static_cast<int>(*n);
  }
  return m;
}

struct FrontSetup {
  const Flags& flags;
  const std::string& dir;
  int n_replicas;
  server::DpRouting routing;
  std::vector<server::ReplicaAddress> replicas;
  std::function<bool(int)> process_ended;
  std::function<void()> stop_replicas;  // on SIGINT/SIGTERM, once the front drains
  std::string mode;                     // for the serving line
};

// Binds the front end, logs the serving line (tests and scripts read the port from it), and
// serves until SIGINT/SIGTERM: then new requests get 503, the replicas are told to stop (they
// end what they run, which the front relays), and the listener closes.
Status run_front(FrontSetup& setup, sigset_t* signals) {
  const Flags& flags = setup.flags;
  std::unique_ptr<FrontModel> model = load_front_model(flags, setup.dir);
  server::DpFrontOptions options;
  options.host = flags.get("host");
  QS_ASSIGN_OR_RETURN(int64_t port, flags.get_int("port"));
  options.port = static_cast<int>(port);
  options.served_model_name =
      flags.has("served-model-name") ? flags.get("served-model-name") : model_arg(flags);
  options.router.routing = setup.routing;
  QS_ASSIGN_OR_RETURN(int64_t max_num_seqs, flags.get_int("max-num-seqs"));
  options.http_threads =
      static_cast<int>(std::min<int64_t>(1024, setup.n_replicas * (max_num_seqs + 16)));
  server::DpFront front(options, setup.replicas, model ? &model->info : nullptr,
                        setup.process_ended);
  QS_ASSIGN_OR_RETURN(int bound_port, front.bind());

  std::thread signal_thread([&front, &setup, signals] {
    int sig = 0;
    sigwait(signals, &sig);
    if (sig == SIGUSR1) return;
    QS_LOG_INFO("received %s, stopping the replicas", sig == SIGINT ? "SIGINT" : "SIGTERM");
    front.begin_drain();
    setup.stop_replicas();
    if (!front.wait_idle(kDrainTimeout)) {
      QS_LOG_WARN("shutdown: requests still in flight after %lld ms; closing anyway",
                  static_cast<long long>(kDrainTimeout.count()));
    }
    front.stop();
  });
  QS_LOG_INFO("serving %s as '%s' on http://%s:%d (data parallel: %d replicas, %s, %s routing)",
              setup.dir.c_str(), options.served_model_name.c_str(), options.host.c_str(),
              bound_port, setup.n_replicas, setup.mode.c_str(),
              server::dp_routing_name(setup.routing));
  Status served = front.serve();
  pthread_kill(signal_thread.native_handle(), SIGUSR1);
  signal_thread.join();
  return served;
}

// Local mode: N children on loopback ports.
Status run_local(const Flags& flags, const std::string& dir, int n, server::DpRouting routing,
                 sigset_t* signals) {
  QS_ASSIGN_OR_RETURN(int threads, thread_count(flags));
  const int each = std::max(1, threads / n);
  QS_ASSIGN_OR_RETURN(std::vector<std::string> args,
                      replica_serve_args(flags, dir, "127.0.0.1", each));
  // Destroying a ReplicaProcess stops it: any return below stops those already started.
  std::vector<std::unique_ptr<ReplicaProcess>> children;
  for (int i = 0; i < n; ++i) {
    QS_ASSIGN_OR_RETURN(auto child, ReplicaProcess::spawn(i, args, /*scrub_mpi_env=*/false));
    QS_LOG_INFO("replica %d: pid %d, %d threads", i, static_cast<int>(child->pid()), each);
    children.push_back(std::move(child));
  }
  FrontSetup setup{flags, dir, n, routing, {}, nullptr, nullptr, ""};
  for (auto& child : children) {
    QS_ASSIGN_OR_RETURN(int port, child->wait_for_port(kReplicaStartTimeout));
    setup.replicas.push_back(server::ReplicaAddress{"127.0.0.1", port});
  }
  setup.process_ended = [&children](int i) { return children[i]->exited(); };
  setup.stop_replicas = [&children] {
    for (auto& child : children) child->terminate();
  };
  setup.mode = std::to_string(each) + (each == 1 ? " thread" : " threads") + " each";
  Status served = run_front(setup, signals);
  for (auto& child : children) {
    child->stop(kDrainTimeout);
    QS_LOG_INFO("replica %d %s", child->index(), child->exit_description().c_str());
  }
  QS_LOG_INFO("server stopped");
  return served;
}

// --- mpirun mode ---------------------------------------------------------------------------

// What each rank tells the others about its replica, in a fixed-size record for all_gather:
// "PORT BOOT_ID NETNS ADDR..." (PORT 0: its replica failed to start). Ranks in the same network
// namespace of the same kernel reach each other on 127.0.0.1; others use the addresses.
constexpr size_t kRecordBytes = 1024;

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line.empty() ? "-" : line;
}

std::string network_namespace() {
  char buf[128];
  const ssize_t n = readlink("/proc/self/ns/net", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "-";
}

// This host's IPv4 addresses, loopback excluded.
std::vector<std::string> host_addresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) continue;
    char text[INET_ADDRSTRLEN];
    if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text))) out.push_back(text);
  }
  freeifaddrs(list);
  return out;
}

struct RankRecord {
  int port = 0;
  std::string boot_id, netns;
  std::vector<std::string> addresses;
};

std::vector<char> encode_record(int port) {
  std::string text = std::to_string(port) + " " +
                     read_first_line("/proc/sys/kernel/random/boot_id") + " " + network_namespace();
  for (const std::string& a : host_addresses()) {
    if (text.size() + 1 + a.size() >= kRecordBytes) break;
    text += " " + a;
  }
  std::vector<char> out(kRecordBytes, '\0');
  std::memcpy(out.data(), text.data(), std::min(text.size(), kRecordBytes - 1));
  return out;
}

RankRecord decode_record(const char* data) {
  std::istringstream in(std::string(data, strnlen(data, kRecordBytes)));
  RankRecord r;
  in >> r.port >> r.boot_id >> r.netns;
  for (std::string a; in >> a;) r.addresses.push_back(a);
  return r;
}

// The launcher's rank of this process before MPI starts, for the replica's log prefix.
int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return 0;
}

// Rank 0's way to rank r's replica: loopback in the same namespace, else the first of its
// addresses that answers.
Result<server::ReplicaAddress> reach(const RankRecord& self, const RankRecord& other, int rank) {
  std::vector<std::string> candidates;
  if (other.boot_id == self.boot_id && other.netns == self.netns) candidates.push_back("127.0.0.1");
  candidates.insert(candidates.end(), other.addresses.begin(), other.addresses.end());
  for (int attempt = 0; attempt < 15; ++attempt) {
    for (const std::string& host : candidates) {
      const server::ReplicaAddress a{host, other.port};
      if (server::replica_answers_health(a)) return a;
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  std::string tried;
  for (const std::string& h : candidates) tried += (tried.empty() ? "" : ", ") + h;
  return unavailable(
      "rank " + std::to_string(rank) + "'s replica (port " + std::to_string(other.port) +
      ") does not answer from rank 0 at any of: " + (tried.empty() ? "no address" : tried));
}

Status run_mpi(const Flags& flags, const std::string& dir, int n, server::DpRouting routing,
               sigset_t* signals) {
  QS_ASSIGN_OR_RETURN(int threads, thread_count(flags));
  QS_ASSIGN_OR_RETURN(std::vector<std::string> args,
                      replica_serve_args(flags, dir, "0.0.0.0", threads));
  // The replica starts before MPI does: a process forked after MPI_Init would inherit the
  // library's sockets and shared memory.
  QS_ASSIGN_OR_RETURN(std::unique_ptr<ReplicaProcess> child,
                      ReplicaProcess::spawn(launcher_rank(), args, /*scrub_mpi_env=*/true));
  QS_ASSIGN_OR_RETURN(std::shared_ptr<dist::Communicator> comm, dist::world());
  if (comm->size() != n) {
    return invalid_argument("mpirun started " + std::to_string(comm->size()) +
                            " ranks but --data-parallel-size is " + std::to_string(n) +
                            ": each rank runs one replica");
  }
  Result<int> port = child->wait_for_port(kReplicaStartTimeout);
  if (!port.ok()) QS_LOG_ERROR("%s", port.status().message().c_str());
  // Every rank gathers, started or not, so that none waits on a rank that gave up.
  const std::vector<char> mine = encode_record(port.ok() ? *port : 0);
  std::vector<char> all(kRecordBytes * static_cast<size_t>(n));
  QS_RETURN_IF_ERROR(comm->all_gather(mine.data(), kRecordBytes, all.data()));
  std::vector<RankRecord> records;
  for (int r = 0; r < n; ++r) records.push_back(decode_record(all.data() + r * kRecordBytes));
  for (int r = 0; r < n; ++r) {
    if (records[r].port == 0) {
      return unavailable("rank " + std::to_string(r) +
                         "'s replica did not start (its log says why)");
    }
  }

  if (comm->rank() != 0) {
    // A replica rank: serve until rank 0 says stop. mpirun forwards SIGTERM/SIGINT to every
    // rank; the replica then ends what it runs, and rank 0's stop follows.
    std::thread signal_thread([&child, signals] {
      int sig = 0;
      sigwait(signals, &sig);
      if (sig != SIGUSR1) child->terminate();
    });
    QS_LOG_INFO("rank %d: replica on port %d, waiting for rank 0", comm->rank(), *port);
    uint8_t stop = 0;
    Status s = comm->wait_broadcast(&stop, 1, 0, /*timeout_s=*/0);
    child->stop(kDrainTimeout);
    pthread_kill(signal_thread.native_handle(), SIGUSR1);
    signal_thread.join();
    return s;
  }

  // Rank 0: the front end. Whatever ends it, the other ranks must hear stop once.
  comm->set_timeout(30);
  bool stop_sent = false;
  auto send_stop = [&] {
    if (stop_sent) return;
    stop_sent = true;
    uint8_t stop = 1;
    if (Status s = comm->broadcast(&stop, 1, 0); !s.ok()) {
      QS_LOG_WARN("telling the other ranks to stop: %s", s.message().c_str());
    }
  };
  FrontSetup setup{flags, dir, n, routing, {}, nullptr, nullptr, ""};
  setup.replicas.push_back(server::ReplicaAddress{"127.0.0.1", *port});
  for (int r = 1; r < n; ++r) {
    Result<server::ReplicaAddress> a = reach(records[0], records[r], r);
    if (!a.ok()) {
      send_stop();
      return a.status();
    }
    QS_LOG_INFO("rank %d's replica: %s:%d", r, a->host.c_str(), a->port);
    setup.replicas.push_back(*a);
  }
  // Only rank 0's own replica is a process it can watch; the others are judged by /health.
  setup.process_ended = [&child](int i) { return i == 0 && child->exited(); };
  setup.stop_replicas = [&child, &send_stop] {
    child->terminate();
    send_stop();
  };
  setup.mode = "one per rank, " + comm->describe();
  Status served = run_front(setup, signals);
  send_stop();
  child->stop(kDrainTimeout);
  QS_LOG_INFO("server stopped");
  return served;
}

}  // namespace

bool data_parallel_requested(const Flags& flags) {
  const Result<int64_t> n = flags.get_int("data-parallel-size");
  return !n.ok() || *n != 1;
}

Status run_data_parallel(const Flags& flags, const std::string& dir, sigset_t* signals) {
  QS_ASSIGN_OR_RETURN(int64_t n, flags.get_int("data-parallel-size"));
  if (n < 1 || n > kMaxReplicas) {
    return invalid_argument("--data-parallel-size must be in [1, " + std::to_string(kMaxReplicas) +
                            "], got " + std::to_string(n));
  }
  QS_ASSIGN_OR_RETURN(server::DpRouting routing,
                      server::parse_dp_routing(flags.get("data-parallel-routing")));
  for (const char* f : {"tensor-parallel-size", "cfg-parallel-size"}) {
    if (flags.get(f) != "1") {
      return invalid_argument(std::string("--data-parallel-size does not combine with --") + f +
                              " yet");
    }
  }
  if (dist::launched_by_mpi()) return run_mpi(flags, dir, static_cast<int>(n), routing, signals);
  return run_local(flags, dir, static_cast<int>(n), routing, signals);
}

}  // namespace qs::apps
