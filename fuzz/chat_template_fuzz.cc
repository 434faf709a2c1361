// fuzz: chat templates. The input is the template source, then (after a separator line) the
// messages as JSON, then extra context as JSON. Parsing and rendering run under a small step
// and output budget, so a template that loops or grows without end stops with an error here
// exactly as it would at the default limits, only sooner.
#include <cstdint>

#include "fuzz_util.h"
#include "tokenizer/chat_template.h"

namespace {

nlohmann::ordered_json parse_or(const std::string& text, nlohmann::ordered_json fallback) {
  auto j = nlohmann::ordered_json::parse(text, nullptr, false);
  return j.is_discarded() ? fallback : j;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nlohmann::ordered_json;
  const auto parts = qs::fuzz::split(data, size, 3);
  auto chat = qs::tok::ChatTemplate::from_string(parts[0], "<s>", "</s>");
  if (!chat.ok()) return 0;
  const ordered_json messages =
      parse_or(parts[1], ordered_json::array({{{"role", "system"}, {"content", "Be brief."}},
                                              {{"role", "user"}, {"content", "Hi <b>&"}},
                                              {{"role", "assistant"}, {"content", "Hello."}}}));
  const ordered_json extra = parse_or(parts[2], ordered_json::object());
  qs::jinja::RenderLimits limits;
  limits.max_steps = 200'000;
  limits.max_output_bytes = 1 << 20;
  limits.max_value_bytes = 1 << 20;
  for (bool add_generation_prompt : {false, true}) {
    (void)chat->render(messages, add_generation_prompt, extra, limits);
  }
  return 0;
}
