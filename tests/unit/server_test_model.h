// tests: a ModelInfo for the server's unit tests without model files: a byte-per-character
// FakeTokenizer (ids 0..2 are <unk> <s> </s>, then printable ASCII, then \n), a 32-token context
// and a tiny chat template that writes <role>content per message.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "detokenizer_test_tokenizer.h"
#include "server/openai_request.h"
#include "tokenizer/chat_template.h"

namespace qs::testing {

struct ServerTestModel {
  ServerTestModel() {
    std::vector<std::string> pieces = {"<unk>", "<s>", "</s>"};
    for (char c = ' '; c <= '~'; ++c) pieces.emplace_back(1, c);
    pieces.emplace_back("\n");
    tokenizer = std::make_unique<FakeTokenizer>(pieces, std::vector<int32_t>{0, 1, 2},
                                                /*spm=*/false, /*eos_id=*/2);
    auto t = tok::ChatTemplate::from_string(
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}");
    chat_template = std::make_unique<tok::ChatTemplate>(std::move(*t));
    info.served_model_name = "tiny";
    info.root = "/models/tiny";
    info.max_model_len = 32;
    info.vocab_size = tokenizer->vocab_size();
    info.tokenizer = tokenizer.get();
    info.chat_template = chat_template.get();
  }
  // Token id of a printable ASCII character.
  static int32_t id(char c) { return 3 + (c - ' '); }

  std::unique_ptr<FakeTokenizer> tokenizer;
  std::unique_ptr<tok::ChatTemplate> chat_template;
  server::ModelInfo info;
};

}  // namespace qs::testing
