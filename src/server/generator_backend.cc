// server: GenerationBackend over engine::Generator (see generator_backend.h).
#include "server/generator_backend.h"

#include <algorithm>
#include <utility>

namespace qs::server {

GeneratorBackend::GeneratorBackend(engine::Generator& generator, int64_t max_num_seqs)
    : generator_(generator), max_num_seqs_(std::max<int64_t>(1, max_num_seqs)) {
  thread_ = std::thread([this] { run(); });
}

GeneratorBackend::~GeneratorBackend() {
  shutdown();
}

Status GeneratorBackend::submit(EngineRequest request, OutputCallback on_output) {
  if (request.extra.logprobs) {
    return unimplemented("logprobs are not supported by this engine yet");
  }
  if (request.extra.min_tokens > 0) {
    return unimplemented("min_tokens is not supported by this engine yet");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return unimplemented("the server is shutting down");
  queue_.push_back(Pending{std::move(request), std::move(on_output)});
  cv_.notify_one();
  return ok_status();
}

void GeneratorBackend::abort(const std::string& id) {
  std::unique_lock<std::mutex> lock(mu_);
  // A queued request ends here and now; a running one at its next step (run_batch).
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (it->request.id != id) continue;
    Pending p = std::move(*it);
    queue_.erase(it);
    lock.unlock();
    RequestOutput out;
    out.id = id;
    out.finished = true;
    out.finish_reason = "abort";
    out.num_prompt_tokens = static_cast<int64_t>(p.request.prompt_ids.size());
    p.on_output(std::move(out));
    return;
  }
  aborted_.insert(id);
}

EngineStats GeneratorBackend::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStats s;
  s.num_running = n_running_;
  s.num_waiting = static_cast<int64_t>(queue_.size());
  return s;
}

void GeneratorBackend::shutdown() {
  std::vector<std::string> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    for (const Pending& p : queue_) queued.push_back(p.request.id);
    cv_.notify_all();
  }
  for (const std::string& id : queued) abort(id);
  if (thread_.joinable() && std::this_thread::get_id() != thread_.get_id()) thread_.join();
}

void GeneratorBackend::run() {
  while (true) {
    std::vector<Pending> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_ && queue_.empty()) return;
      while (!queue_.empty() && static_cast<int64_t>(batch.size()) < max_num_seqs_) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      n_running_ = static_cast<int64_t>(batch.size());
    }
    run_batch(std::move(batch));
    std::lock_guard<std::mutex> lock(mu_);
    n_running_ = 0;
  }
}

void GeneratorBackend::run_batch(std::vector<Pending> batch) {
  std::vector<engine::GenerationRequest> requests;
  for (const Pending& p : batch) {
    engine::GenerationRequest r;
    r.prompt_ids = p.request.prompt_ids;
    r.params = p.request.params;
    requests.push_back(std::move(r));
  }
  std::vector<bool> done(batch.size(), false);
  auto is_aborted = [this](const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    return aborted_.erase(id) > 0;
  };
  auto on_step = [&](size_t i, const StepOutput& step) {
    if (done[i]) return;  // aborted earlier: the batch computes on, nobody listens
    const Pending& p = batch[i];
    RequestOutput out;
    out.id = p.request.id;
    out.num_prompt_tokens = static_cast<int64_t>(p.request.prompt_ids.size());
    if (is_aborted(out.id)) {
      out.finished = true;
      out.finish_reason = "abort";
    } else {
      if (step.token >= 0) out.token_ids.push_back(step.token);
      out.text = step.text;
      out.finished = step.finished;
      out.finish_reason = step.finish_reason;
      out.stop_string = step.stop_string;
      out.stop_token_id = step.stop_token_id;
    }
    done[i] = out.finished;
    p.on_output(std::move(out));
  };
  Result<std::vector<engine::GenerationResult>> results = generator_.generate(requests, on_step);
  {
    // An abort that raced with the request's last step has nothing left to stop.
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < batch.size(); ++i) {
      if (done[i]) aborted_.erase(batch[i].request.id);
    }
  }
  if (results.ok()) return;
  // The batch failed as a whole (e.g. the KV cache for all of it does not fit in memory):
  // every request still open ends with that error.
  for (size_t i = 0; i < batch.size(); ++i) {
    if (done[i]) continue;
    is_aborted(batch[i].request.id);  // drop a pending abort mark with the request
    RequestOutput out;
    out.id = batch[i].request.id;
    out.finished = true;
    out.finish_reason = "abort";
    out.error = results.status();
    out.num_prompt_tokens = static_cast<int64_t>(batch[i].request.prompt_ids.size());
    batch[i].on_output(std::move(out));
  }
}

}  // namespace qs::server
