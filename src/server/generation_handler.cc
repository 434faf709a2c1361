// server: the generation endpoints (see generation_handler.h).
#include "server/generation_handler.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <ctime>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <utility>

#include "core/log.h"
#include "server/client_connection.h"
#include "server/openai_response.h"

namespace qs::server {

using Clock = std::chrono::steady_clock;

void InflightRequests::add(const std::vector<std::string>& ids) {
  std::lock_guard<std::mutex> lock(mu_);
  ids_.insert(ids.begin(), ids.end());
}

void InflightRequests::remove(const std::vector<std::string>& ids) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& id : ids) {
    auto it = ids_.find(id);
    if (it != ids_.end()) ids_.erase(it);
  }
  cv_.notify_all();
}

std::vector<std::string> InflightRequests::ids() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {ids_.begin(), ids_.end()};
}

bool InflightRequests::wait_empty(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [this] { return ids_.empty(); });
}

void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.http_status;
  res.set_content(to_wire(error.to_json()), "application/json");
}

std::string random_request_id() {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng(std::random_device{}() ^ (counter++ << 32));
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return buf;
}

namespace {

// What one choice has produced so far.
struct ChoiceProgress {
  std::string backend_id;
  size_t prompt_index = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // of the prompt, served by the prefix cache
  int64_t n_tokens = 0;
  std::string text;
  std::vector<SampleLogprobs> logprobs;
  bool finished = false;
  std::string finish_reason;
  std::optional<std::string> stop_string;
  std::optional<int32_t> stop_token_id;
  Status error;
  Clock::time_point last_token;
};

// The state one HTTP request shares with the engine thread's callbacks. Held by
// shared_ptr: a callback may still arrive after the HTTP side has given up.
struct Session {
  Session(ServerMetrics& m, bool stream) : metrics(m), streaming(stream) {}

  // Engine thread: records the update, its metrics, and wakes the HTTP thread.
  void on_output(size_t index, RequestOutput out) {
    const Clock::time_point now = Clock::now();
    std::lock_guard<std::mutex> lock(mu);
    ChoiceProgress& c = choices[index];
    if (c.finished) return;
    const int64_t n_new = static_cast<int64_t>(out.new_token_ids.size());
    if (n_new > 0) {
      if (c.n_tokens == 0) {
        metrics.observe_ttft(std::chrono::duration<double>(now - arrival).count());
        metrics.add_prompt_tokens(c.prompt_tokens);
      } else {
        metrics.observe_inter_token_latency(
            std::chrono::duration<double>(now - c.last_token).count());
      }
      metrics.add_generation_tokens(n_new);
      c.last_token = now;
      c.n_tokens += n_new;
    }
    c.cached_tokens = std::max(c.cached_tokens, out.num_cached_tokens);
    c.text += out.new_text;
    c.logprobs.insert(c.logprobs.end(), out.logprobs.begin(), out.logprobs.end());
    if (out.finished) {
      c.finished = true;
      c.finish_reason = out.finish_reason;
      c.stop_string = out.stop_string;
      c.stop_token_id = out.stop_token_id;
      c.error = out.error;
      --n_open;
      if (out.error.ok()) {
        metrics.request_finished(out.finish_reason,
                                 std::chrono::duration<double>(now - arrival).count(),
                                 c.prompt_tokens, c.n_tokens);
      }
    }
    if (streaming) events.emplace_back(index, std::move(out));
    cv.notify_all();
  }

  std::vector<std::string> open_ids() {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::string> ids;
    for (const ChoiceProgress& c : choices) {
      if (!c.finished) ids.push_back(c.backend_id);
    }
    return ids;
  }

  std::vector<std::string> all_ids() const {
    std::vector<std::string> ids;
    for (const ChoiceProgress& c : choices) ids.push_back(c.backend_id);
    return ids;
  }

  ServerMetrics& metrics;
  const bool streaming;
  Clock::time_point arrival = Clock::now();
  std::mutex mu;
  std::condition_variable cv;
  std::vector<ChoiceProgress> choices;  // fixed before the first submit
  size_t n_open = 0;
  std::deque<std::pair<size_t, RequestOutput>> events;  // streaming only
};

// Prompt tokens count once per prompt, as in vLLM, and so do cached ones: those of the
// prompt's first choice (its siblings then hit the blocks it filled).
Usage total_usage(const GenerationRequest& r, const Session& s, bool cached_tokens) {
  Usage u;
  for (const Prompt& p : r.prompts) u.prompt_tokens += static_cast<int64_t>(p.ids.size());
  for (const ChoiceProgress& c : s.choices) u.completion_tokens += c.n_tokens;
  if (cached_tokens) {
    u.cached_tokens = 0;
    for (size_t i = 0; i < s.choices.size(); i += static_cast<size_t>(r.n))
      *u.cached_tokens += s.choices[i].cached_tokens;
  }
  return u;
}

// The SSE writer of one streaming response; lives in the content provider.
class StreamWriter {
 public:
  StreamWriter(std::shared_ptr<Session> session, GenerationRequest request, ResponseHeader header,
               const ModelInfo& model, bool cached_tokens)
      : s_(std::move(session)),
        r_(std::move(request)),
        h_(std::move(header)),
        model_(model),
        cached_tokens_(cached_tokens),
        text_offsets_(s_->choices.size(), 0) {}

  // One call of the content provider: false ends the response as failed (client gone).
  bool step(httplib::DataSink& sink) {
    if (!started_) {
      started_ = true;
      if (!write_preamble(sink)) return false;
    }
    std::deque<std::pair<size_t, RequestOutput>> events;
    bool all_done = false;
    {
      std::unique_lock<std::mutex> lock(s_->mu);
      // A bounded wait, so the loop around us can notice a server shutdown.
      s_->cv.wait_for(lock, std::chrono::milliseconds(200),
                      [this] { return !s_->events.empty() || s_->n_open == 0; });
      events.swap(s_->events);
      all_done = s_->n_open == 0;
    }
    for (auto& [index, out] : events) {
      if (!write_event(sink, index, out)) return false;
      // The model cannot run any more (a tensor-parallel rank was lost): the error event is the
      // last thing sent, never followed by [DONE], so no client takes the output for complete.
      if (out.error.code() == StatusCode::kUnavailable) {
        sink.done();
        return true;
      }
    }
    if (!all_done) return true;
    if (r_.include_usage) {
      Usage usage;
      {
        std::lock_guard<std::mutex> lock(s_->mu);
        usage = total_usage(r_, *s_, cached_tokens_);
      }
      if (!write(sink, sse_event(usage_chunk(r_.endpoint, h_, usage)))) return false;
    }
    if (!write(sink, sse_done())) return false;
    sink.done();
    return true;
  }

 private:
  static bool write(httplib::DataSink& sink, const std::string& data) {
    return sink.write(data.data(), data.size());
  }

  // Chat: the assistant role opens every choice. Completions with echo: the prompt.
  bool write_preamble(httplib::DataSink& sink) {
    for (size_t i = 0; i < s_->choices.size(); ++i) {
      const int index = static_cast<int>(i);
      if (r_.endpoint == Endpoint::kChat) {
        if (!write(sink, sse_event(chat_chunk(h_, index, "assistant", "", "", nullptr, nullptr))))
          return false;
      } else if (r_.echo) {
        const std::string& text = r_.prompts[s_->choices[i].prompt_index].text;
        text_offsets_[i] += static_cast<int64_t>(text.size());
        const Json logprobs =
            r_.params.logprobs ? completion_logprobs_json({}, *model_.tokenizer, 0) : Json(nullptr);
        if (!write(sink, sse_event(completion_chunk(h_, index, text, "", nullptr, logprobs))))
          return false;
      }
    }
    return true;
  }

  bool write_event(httplib::DataSink& sink, size_t i, const RequestOutput& out) {
    if (!out.error.ok()) return write(sink, sse_event(error_from_status(out.error).to_json()));
    if (out.new_token_ids.empty() && out.new_text.empty() && !out.finished) return true;
    const int index = static_cast<int>(i);
    const Json stop_reason =
        out.finished ? stop_reason_json(out.stop_string, out.stop_token_id) : Json(nullptr);
    Json chunk;
    if (r_.endpoint == Endpoint::kChat) {
      const Json logprobs =
          r_.params.logprobs ? chat_logprobs_json(out.logprobs, *model_.tokenizer) : Json(nullptr);
      chunk = chat_chunk(h_, index, std::nullopt, out.new_text, out.finish_reason, stop_reason,
                         logprobs);
    } else {
      const Json logprobs =
          r_.params.logprobs
              ? completion_logprobs_json(out.logprobs, *model_.tokenizer, text_offsets_[i])
              : Json(nullptr);
      chunk = completion_chunk(h_, index, out.new_text, out.finish_reason, stop_reason, logprobs);
    }
    text_offsets_[i] += static_cast<int64_t>(out.new_text.size());
    if (r_.continuous_usage_stats) {
      std::lock_guard<std::mutex> lock(s_->mu);
      const ChoiceProgress& c = s_->choices[i];
      chunk["usage"] = usage_json(Usage{c.prompt_tokens, c.n_tokens});
    }
    return write(sink, sse_event(chunk));
  }

  std::shared_ptr<Session> s_;
  GenerationRequest r_;
  ResponseHeader h_;
  const ModelInfo& model_;
  const bool cached_tokens_;
  std::vector<int64_t> text_offsets_;  // bytes of text sent per choice
  bool started_ = false;
};

}  // namespace

GenerationHandler::GenerationHandler(const ModelInfo& model, GenerationBackend& backend,
                                     ServerMetrics& metrics, InflightRequests& inflight,
                                     bool prompt_tokens_details)
    : model_(model),
      backend_(backend),
      metrics_(metrics),
      inflight_(inflight),
      prompt_tokens_details_(prompt_tokens_details) {}

void GenerationHandler::handle(Endpoint endpoint, const httplib::Request& req,
                               httplib::Response& res, const std::string& request_id) {
  GenerationRequest r;
  if (auto e = parse_generation_request(endpoint, req.body, model_, &r)) {
    QS_LOG_INFO("request %s rejected: %s", request_id.c_str(), e->message.c_str());
    return send_error(res, *e);
  }
  for (const std::string& key : r.ignored_fields) {
    QS_LOG_WARN("request %s: the following fields were present in the request but ignored: %s",
                request_id.c_str(), key.c_str());
  }
  ResponseHeader header;
  header.id = (endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + request_id;
  header.created = static_cast<int64_t>(std::time(nullptr));
  header.model = r.model;

  auto session = std::make_shared<Session>(metrics_, r.stream);
  // Backend ids stay unique even when clients reuse an X-Request-Id.
  const std::string internal_id = random_request_id();
  std::vector<EngineRequest> requests;
  for (size_t p = 0; p < r.prompts.size(); ++p) {
    int32_t max_tokens = 0;
    if (auto e = max_tokens_for(r, r.prompts[p], model_, &max_tokens)) return send_error(res, *e);
    for (int i = 0; i < r.n; ++i) {
      EngineRequest e;
      e.id = internal_id + "-" + std::to_string(session->choices.size());
      e.prompt_ids = r.prompts[p].ids;
      e.mm_items = r.prompts[p].mm_items;
      e.params = r.params;
      e.params.max_tokens = max_tokens;
      // vLLM's parallel sampling: child i of a seeded request uses seed + i.
      if (e.params.seed) e.params.seed = *e.params.seed + static_cast<uint64_t>(i);
      ChoiceProgress c;
      c.backend_id = e.id;
      c.prompt_index = p;
      c.prompt_tokens = static_cast<int64_t>(e.prompt_ids.size());
      session->choices.push_back(std::move(c));
      requests.push_back(std::move(e));
    }
  }
  session->n_open = session->choices.size();
  const std::vector<std::string> ids = session->all_ids();
  inflight_.add(ids);
  for (size_t i = 0; i < requests.size(); ++i) {
    Status s = backend_.submit(std::move(requests[i]), [session, i](RequestOutput out) {
      session->on_output(i, std::move(out));
    });
    if (!s.ok()) {
      // Nothing of this request may run on: abort what was already queued.
      for (size_t j = 0; j < i; ++j) backend_.abort(ids[j]);
      inflight_.remove(ids);
      return send_error(res, error_from_status(s));
    }
  }
  QS_LOG_INFO("request %s: %zu choice(s), prompt %zu tokens, stream %d", request_id.c_str(),
              ids.size(), r.prompts[0].ids.size(), r.stream ? 1 : 0);

  if (r.stream) {
    auto writer =
        std::make_shared<StreamWriter>(session, r, header, model_, prompt_tokens_details_);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [writer](size_t, httplib::DataSink& sink) { return writer->step(sink); },
        [this, session, ids, request_id,
         released = std::make_shared<std::atomic<bool>>(false)](bool success) {
          if (released->exchange(true)) return;  // a copied Response releases again
          if (!success) {
            // The client went away (or the server is stopping): stop its choices.
            const std::vector<std::string> open = session->open_ids();
            if (!open.empty())
              QS_LOG_INFO("request %s: stream ended early, aborting", request_id.c_str());
            for (const std::string& id : open) backend_.abort(id);
          }
          inflight_.remove(ids);
        });
    return;
  }

  {
    // The answer goes out only when every choice has finished, so httplib would notice a
    // client that hung up only then: watch its connection while waiting instead.
    const std::optional<ClientConnection> connection = ClientConnection::of(req);
    std::unique_lock<std::mutex> lock(session->mu);
    while (!session->cv.wait_for(lock, kHangUpPollInterval, [&] { return session->n_open == 0; })) {
      if (!backend_.healthy()) {
        lock.unlock();
        for (const std::string& id : ids) backend_.abort(id);
        inflight_.remove(ids);
        return send_error(res, service_unavailable("The engine stopped."));
      }
      if (connection && connection->hung_up()) {
        lock.unlock();
        QS_LOG_INFO("request %s: client went away, aborting", request_id.c_str());
        for (const std::string& id : session->open_ids()) backend_.abort(id);
        inflight_.remove(ids);
        // Nothing can be sent; the access log shows nginx's "client closed request".
        res.status = kClientClosedRequest;
        return;
      }
    }
  }
  inflight_.remove(ids);
  std::vector<Choice> choices;
  for (size_t i = 0; i < session->choices.size(); ++i) {
    const ChoiceProgress& c = session->choices[i];
    if (!c.error.ok()) return send_error(res, error_from_status(c.error));
    Choice choice;
    choice.index = static_cast<int>(i);
    choice.text = r.echo ? r.prompts[c.prompt_index].text + c.text : c.text;
    choice.finish_reason = c.finish_reason;
    choice.stop_string = c.stop_string;
    choice.stop_token_id = c.stop_token_id;
    choice.logprobs = c.logprobs;
    choices.push_back(std::move(choice));
  }
  const Usage usage = total_usage(r, *session, prompt_tokens_details_);
  const bool want_logprobs = r.params.logprobs.has_value();
  const Json body =
      endpoint == Endpoint::kChat
          ? chat_response(header, choices, usage, want_logprobs, *model_.tokenizer)
          : completion_response(header, choices, usage, want_logprobs, *model_.tokenizer);
  res.set_content(to_wire(body), "application/json");
}

}  // namespace qs::server
