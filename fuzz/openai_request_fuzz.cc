// fuzz: OpenAI request bodies as the server receives them. The input is an endpoint name
// (completions, chat, tokenize, detokenize), a separator line and the body; without a
// separator the whole input is the body of every endpoint. The model is the shipped
// stories260K tokenizer with Qwen2.5's chat template, so prompts are tokenized and messages
// rendered for real. Every outcome must be an accepted request or an ApiError with an HTTP
// error status whose JSON the server can send; nothing may throw.
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>

#include "core/check.h"
#include "fuzz_util.h"
#include "server/openai_request.h"
#include "server/openai_response.h"

namespace {

struct Model {
  Model() {
    auto t = qs::tok::load_tokenizer(QS_SOURCE_DIR "/models/stories260K");
    QS_CHECK(t.ok());
    tokenizer = std::move(*t);
    std::ifstream in(QS_SOURCE_DIR
                     "/tests/golden/fixtures/chat_templates/qwen2.5-7b-instruct.jinja");
    const std::string source((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
    auto c = qs::tok::ChatTemplate::from_string(source, "<s>", "</s>");
    QS_CHECK(c.ok());
    chat_template = std::make_unique<qs::tok::ChatTemplate>(std::move(*c));
    info.served_model_name = "stories";
    info.root = QS_SOURCE_DIR "/models/stories260K";
    info.max_model_len = 256;
    info.vocab_size = tokenizer->vocab_size();
    info.tokenizer = tokenizer.get();
    info.chat_template = chat_template.get();
  }
  std::unique_ptr<qs::tok::Tokenizer> tokenizer;
  std::unique_ptr<qs::tok::ChatTemplate> chat_template;
  qs::server::ModelInfo info;
};

void check_error(const std::optional<qs::server::ApiError>& e) {
  if (!e) return;
  QS_CHECK(e->http_status >= 400 && e->http_status < 600);
  QS_CHECK(!qs::server::to_wire(e->to_json()).empty());
}

void run(const Model& m, const std::string& endpoint, const std::string& body) {
  using namespace qs::server;
  if (endpoint == "completions" || endpoint == "chat") {
    GenerationRequest r;
    const auto e = parse_generation_request(
        endpoint == "chat" ? Endpoint::kChat : Endpoint::kCompletions, body, m.info, &r);
    check_error(e);
    if (e) return;
    QS_CHECK(!r.prompts.empty());
    for (const Prompt& p : r.prompts) {
      int32_t max_tokens = 0;
      QS_CHECK(!max_tokens_for(r, p, m.info, &max_tokens));
      QS_CHECK(max_tokens >= 1 && p.ids.size() + max_tokens <= size_t(m.info.max_model_len));
      for (int32_t id : p.ids) QS_CHECK(id >= 0 && id < m.info.vocab_size);
    }
  } else if (endpoint == "tokenize") {
    TokenizeRequest r;
    const auto e = parse_tokenize_request(body, m.info, &r);
    check_error(e);
    if (!e) (void)to_wire(tokenize_response(r.ids, r.return_token_strs, m.info));
  } else if (endpoint == "detokenize") {
    DetokenizeRequest r;
    const auto e = parse_detokenize_request(body, m.info, &r);
    check_error(e);
    if (!e) (void)m.tokenizer->decode(r.ids, /*skip_special=*/true);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Model model;
  const auto parts = qs::fuzz::split(data, size, 2);
  if (parts[1].empty() && size > 0) {
    for (const char* endpoint : {"completions", "chat", "tokenize", "detokenize"})
      run(model, endpoint, parts[0]);
  } else {
    run(model, parts[0], parts[1]);
  }
  return 0;
}
