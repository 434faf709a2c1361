// fuzz: chat content parts and their image URLs as the chat endpoint reads them. The input is
// a JSON `messages` list: both content formats are parsed (chat_content.h), every image URL is
// loaded without a local media directory (data: URLs base64-decoded, the rest refused), each
// decoded image goes through the fixture checkpoint's image processor under a small pixel cap,
// and the placeholders of a prompt made from the parts are expanded (vision/image_prompt.h).
// The raw input is also fed to the base64 decoder and the template's content-loop detection.
// Every outcome must be a result or an ApiError with a 4xx status; nothing may throw.
#include <cstdint>
#include <string>
#include <vector>

#include "core/check.h"
#include "server/chat_content.h"
#include "server/media_url.h"
#include "vision/image_prompt.h"

namespace {

constexpr int32_t kImagePad = 290;  // the fixture's <|image_pad|>

const qs::vision::Qwen2VLImageConfig& processor() {
  static const qs::vision::Qwen2VLImageConfig config = [] {
    auto c = qs::vision::load_qwen2_vl_image_config(QS_SOURCE_DIR
                                                    "/tests/golden/fixtures/vl/qwen2_5_vl");
    QS_CHECK(c.ok());
    return *c;
  }();
  return config;
}

void check_error(const std::optional<qs::server::ApiError>& e) {
  if (e) QS_CHECK(e->http_status == 400 && !e->message.empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qs::server;
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (std::optional<std::string> decoded = base64_decode(text)) {
    QS_CHECK(decoded->size() <= text.size() / 4 * 3);
  }
  (void)template_iterates_content(text);
  const Json messages = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (messages.is_discarded()) return 0;
  for (const bool openai_format : {true, false}) {
    ChatMessages chat;
    const auto e = parse_chat_messages(messages, openai_format, "<|image_pad|>", &chat);
    check_error(e);
    if (e) continue;
    QS_CHECK(chat.messages.size() == messages.size());
    if (!openai_format) continue;
    std::vector<qs::vision::PromptImage> images;
    for (const std::string& url : chat.image_urls) {
      std::string bytes;
      const auto load = load_media_url(url, /*allowed_local_dir=*/"", &bytes);
      check_error(load);
      if (load) continue;
      qs::vision::ImageReadOptions options;
      options.max_pixels = 1 << 20;
      auto image = qs::vision::prepare_prompt_image(bytes, "fuzz", processor(), options);
      if (!image.ok()) continue;
      QS_CHECK(image->n_tokens > 0 && image->hash != 0);
      QS_CHECK(static_cast<int64_t>(image->pixels->size()) ==
               image->grid.t * image->grid.h * image->grid.w * 1176);
      images.push_back(std::move(*image));
    }
    // A prompt with one placeholder per loaded image between two text tokens.
    std::vector<int32_t> ids = {1};
    for (size_t i = 0; i < images.size(); ++i) ids.insert(ids.end(), {288, kImagePad, 289});
    auto items = qs::vision::expand_image_placeholders(&ids, kImagePad, images);
    QS_CHECK(items.ok() && items->size() == images.size());
    for (const auto& item : *items) QS_CHECK(ids.at(static_cast<size_t>(item.offset)) == kImagePad);
  }
  return 0;
}
