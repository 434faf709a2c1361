// diffusion: CFG parallelism's messages (flux_cfg_parallel.h) and FluxPipeline's two ends of
// it: set_cfg_parallel and rank 1's worker loop.
#include "diffusion/flux_cfg_parallel.h"

#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "core/log.h"

namespace qs::diffusion {

namespace {

constexpr double kPeerSlackSeconds = 30.0;
constexpr double kPeerWorkFactor = 3.0;
// The first byte of every message; the job's layout is versioned by its tag.
constexpr uint8_t kJobTag = 'J';
constexpr uint8_t kStopTag = 'S';

class JobWriter {
 public:
  explicit JobWriter(std::vector<uint8_t>* out) : out_(out) {}
  template <typename T>
  void scalar(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const size_t at = out_->size();
    out_->resize(at + sizeof(T));
    std::memcpy(out_->data() + at, &v, sizeof(T));
  }
  void bytes(const void* data, size_t n) {
    scalar<uint64_t>(n);
    const size_t at = out_->size();
    out_->resize(at + n);
    if (n) std::memcpy(out_->data() + at, data, n);
  }

 private:
  std::vector<uint8_t>* out_;
};

// Reads what JobWriter wrote; running past the end sets !ok() instead of reading out of bounds.
class JobReader {
 public:
  JobReader(const std::vector<uint8_t>& in, size_t at) : in_(in), at_(at) {}
  template <typename T>
  T scalar() {
    T v{};
    if (!take(sizeof(T))) return v;
    std::memcpy(&v, in_.data() + at_ - sizeof(T), sizeof(T));
    return v;
  }
  std::string text() {
    const uint64_t n = scalar<uint64_t>();
    if (!take(n)) return {};
    return std::string(reinterpret_cast<const char*>(in_.data()) + at_ - n, n);
  }
  std::vector<float> floats() {
    const uint64_t n = scalar<uint64_t>();
    if (n % sizeof(float) != 0 || !take(n)) {
      ok_ = false;
      return {};
    }
    std::vector<float> v(n / sizeof(float));
    if (n) std::memcpy(v.data(), in_.data() + at_ - n, n);
    return v;
  }
  bool ok() const { return ok_; }
  bool at_end() const { return at_ == in_.size(); }

 private:
  bool take(uint64_t n) {
    if (!ok_ || n > in_.size() - at_) {
      ok_ = false;
      return false;
    }
    at_ += n;
    return true;
  }
  const std::vector<uint8_t>& in_;
  size_t at_;
  bool ok_ = true;
};

}  // namespace

double cfg_peer_timeout(double own_seconds) {
  return kPeerSlackSeconds + kPeerWorkFactor * own_seconds;
}

std::vector<uint8_t> encode_cfg_job(const FluxRequest& req) {
  std::vector<uint8_t> out{kJobTag};
  JobWriter w(&out);
  w.bytes(req.prompt.data(), req.prompt.size());
  w.bytes(req.negative_prompt.data(), req.negative_prompt.size());
  w.scalar(req.width);
  w.scalar(req.height);
  w.scalar(req.steps);
  w.scalar(req.guidance_scale);
  w.scalar(req.true_cfg_scale);
  w.scalar(req.max_sequence_length);
  w.scalar(req.seed);
  w.bytes(req.noise.data(), req.noise.size() * sizeof(float));
  return out;
}

Result<FluxRequest> decode_cfg_job(const std::vector<uint8_t>& bytes) {
  if (bytes.empty() || bytes[0] != kJobTag) {
    return internal_error("CFG-parallel: a message of " + std::to_string(bytes.size()) +
                          " bytes is not a job");
  }
  JobReader r(bytes, 1);
  FluxRequest req;
  req.prompt = r.text();
  req.negative_prompt = r.text();
  req.width = r.scalar<int64_t>();
  req.height = r.scalar<int64_t>();
  req.steps = r.scalar<int64_t>();
  req.guidance_scale = r.scalar<double>();
  req.true_cfg_scale = r.scalar<double>();
  req.max_sequence_length = r.scalar<int64_t>();
  req.seed = r.scalar<uint64_t>();
  req.noise = r.floats();
  if (!r.ok() || !r.at_end()) {
    return internal_error("CFG-parallel: a job message of " + std::to_string(bytes.size()) +
                          " bytes is truncated or too long (ranks of different builds?)");
  }
  return req;
}

bool is_cfg_stop(const std::vector<uint8_t>& bytes) {
  return bytes.size() == 1 && bytes[0] == kStopTag;
}

Status send_cfg_stop(dist::Communicator& group) {
  if (!group.health().ok()) return ok_status();
  std::vector<uint8_t> stop{kStopTag};
  group.set_timeout(kPeerSlackSeconds);
  return group.broadcast_bytes(&stop, 0);
}

Status cfg_agree(dist::Communicator& group, const Status& mine, double own_seconds) {
  const int32_t code = static_cast<int32_t>(mine.code());
  std::vector<int32_t> codes(static_cast<size_t>(group.size()));
  group.set_timeout(cfg_peer_timeout(own_seconds));
  QS_RETURN_IF_ERROR(group.all_gather(&code, sizeof(code), codes.data()));
  // Every rank walks the same codes, so every failed rank's message is broadcast in the same
  // order on all of them.
  Status first;
  for (int r = 0; r < group.size(); ++r) {
    if (codes[r] == static_cast<int32_t>(StatusCode::kOk)) continue;
    std::vector<uint8_t> text;
    if (r == group.rank()) text.assign(mine.message().begin(), mine.message().end());
    group.set_timeout(kPeerSlackSeconds);
    QS_RETURN_IF_ERROR(group.broadcast_bytes(&text, r));
    if (first.ok()) {
      first = Status(
          static_cast<StatusCode>(codes[r]),
          "CFG-parallel rank " + std::to_string(r) + ": " + std::string(text.begin(), text.end()));
    }
  }
  return mine.ok() ? first : mine;
}

Status cfg_exchange_predictions(dist::Communicator& group, const std::vector<float>& mine,
                                std::vector<float>* both, double own_seconds) {
  both->resize(mine.size() * static_cast<size_t>(group.size()));
  group.set_timeout(cfg_peer_timeout(own_seconds));
  return group.all_gather(mine.data(), mine.size() * sizeof(float), both->data());
}

Status cfg_exchange_stop(dist::Communicator& group, bool* stop, double own_seconds) {
  uint8_t flag = *stop ? 1 : 0;
  group.set_timeout(cfg_peer_timeout(own_seconds));
  QS_RETURN_IF_ERROR(group.broadcast(&flag, 1, 0));
  *stop = flag != 0;
  return ok_status();
}

Status FluxPipeline::set_cfg_parallel(std::shared_ptr<dist::Communicator> group,
                                      std::function<void(const Status&)> on_broken) {
  if (group && group->size() != 2) {
    return invalid_argument(
        "CFG parallelism runs the two guidance branches on 2 ranks; the group "
        "has " +
        std::to_string(group->size()));
  }
  // MPI matches a non-blocking collective only with non-blocking ones, and the communicator
  // blocks when it has no timeout: every collective of the pair runs timed, on both ranks.
  if (group) group->set_timeout(cfg_peer_timeout(0.0));
  cfg_group_ = std::move(group);
  cfg_on_broken_ = std::move(on_broken);
  return ok_status();
}

Status FluxPipeline::run_cfg_worker(ThreadPool& pool) const {
  if (!cfg_group_ || cfg_group_->rank() != 1) {
    return internal_error("run_cfg_worker runs on rank 1 of a CFG-parallel group");
  }
  for (;;) {
    std::vector<uint8_t> message;
    // Idle between requests for as long as the server runs; once rank 0 has started the
    // message, its bytes follow at once.
    cfg_group_->set_timeout(cfg_peer_timeout(0.0));
    QS_RETURN_IF_ERROR(cfg_group_->wait_broadcast_bytes(&message, 0, 0.0));
    if (is_cfg_stop(message)) return ok_status();
    Result<FluxRequest> req = decode_cfg_job(message);
    const Status done = req.ok()
                            ? denoise_branches(*req, Branches::kCfgRank1, pool, nullptr).status()
                            : cfg_agree(*cfg_group_, req.status(), 0.0);
    QS_RETURN_IF_ERROR(cfg_group_->health());
    if (!done.ok()) QS_LOG_INFO("CFG-parallel rank 1: job ended: %s", done.message().c_str());
  }
}

}  // namespace qs::diffusion
