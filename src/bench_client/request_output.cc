// bench_client: turning a response stream into a RequestOutput (see request_output.h).
#include "bench_client/request_output.h"

#include <nlohmann/json.hpp>

namespace qs::bench {

StreamAccumulator::StreamAccumulator(bool chat, double start, int64_t prompt_len) : chat_(chat) {
  out_.start_time = start;
  out_.prompt_len = prompt_len;
  last_t_ = start;
}

void StreamAccumulator::on_event(std::string_view data, double t) {
  if (done_) return;
  if (data == "[DONE]") {
    done_ = true;
    return;
  }
  nlohmann::json chunk = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (chunk.is_discarded() || !chunk.is_object()) {
    out_.error = "invalid JSON in stream: " + std::string(data.substr(0, 200));
    done_ = true;
    return;
  }
  // Servers report errors mid-stream as {"error": {...}} (vLLM, llama.cpp).
  if (chunk.contains("error")) {
    out_.error = "server error in stream: " + chunk["error"].dump();
    done_ = true;
    return;
  }
  auto choices = chunk.find("choices");
  if (choices != chunk.end() && choices->is_array() && !choices->empty()) {
    const nlohmann::json& c = (*choices)[0];
    const nlohmann::json* text = nullptr;
    if (chat_) {
      if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content")) {
        text = &c["delta"]["content"];
      }
    } else if (c.contains("text")) {
      text = &c["text"];
    }
    if (!got_token_) {
      out_.ttft = t - out_.start_time;
      got_token_ = true;
    } else {
      out_.itl.push_back(t - last_t_);
    }
    last_t_ = t;
    if (text && text->is_string()) out_.generated_text += text->get<std::string>();
  }
  // vLLM reads usage only from the usage-only chunk; llama.cpp-style servers put it in the
  // last chunk beside choices, so it is read wherever it appears.
  auto usage = chunk.find("usage");
  if (usage != chunk.end() && usage->is_object()) {
    if (auto ct = usage->find("completion_tokens"); ct != usage->end() && ct->is_number_integer()) {
      out_.output_tokens = ct->get<int64_t>();
    }
    if (auto pt = usage->find("prompt_tokens"); pt != usage->end() && pt->is_number_integer()) {
      out_.prompt_len = pt->get<int64_t>();
    }
  }
}

RequestOutput StreamAccumulator::finish() {
  RequestOutput out = std::move(out_);
  if (!out.error.empty()) return out;
  if (!got_token_) {
    out.error = "Never received a valid chunk to calculate TTFT.";
    return out;
  }
  out.success = true;
  out.latency = last_t_ - out.start_time;
  return out;
}

}  // namespace qs::bench
