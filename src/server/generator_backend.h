// server: a GenerationBackend over today's engine::Generator, until the long-lived engine
// (EngineLoop) replaces it. One engine thread takes every queued request (FCFS, at most
// max_num_seqs at a time), runs them as one Generator batch and streams each step to its
// request's callback. What it cannot do, it says: logprobs and min_tokens are rejected at
// submit; a running request cannot be stopped inside a Generator batch, so abort() ends
// the request for its client at once ("abort") while the batch computes its remaining
// tokens unseen; KV usage and prefix-cache counters stay 0 (Generator sizes its cache per
// batch and has no prefix cache). This file is the one to delete when EngineLoop lands.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/generator.h"
#include "server/backend.h"

namespace qs::server {

class GeneratorBackend : public GenerationBackend {
 public:
  // All references must outlive the backend. Starts the engine thread.
  GeneratorBackend(engine::Generator& generator, int64_t max_num_seqs);
  ~GeneratorBackend() override;

  Status submit(EngineRequest request, OutputCallback on_output) override;
  void abort(const std::string& id) override;
  EngineStats stats() const override;
  bool healthy() const override { return true; }
  void shutdown() override;

 private:
  struct Pending {
    EngineRequest request;
    OutputCallback on_output;
  };
  void run();
  // Runs one batch on the engine thread.
  void run_batch(std::vector<Pending> batch);

  engine::Generator& generator_;
  const int64_t max_num_seqs_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  std::set<std::string> aborted_;  // ids asked to stop, queued or running
  int64_t n_running_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace qs::server
