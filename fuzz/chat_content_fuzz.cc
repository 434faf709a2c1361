// fuzz: chat content parts and their image and audio URLs as the chat endpoint reads them. The
// input is a JSON `messages` list: both content formats are parsed (chat_content.h), every
// image and audio URL (input_audio parts become data URLs) is loaded without a local media
// directory (data: URLs base64-decoded, the rest refused), each decoded image goes through the
// fixture checkpoint's image processor under a small pixel cap and each clip through the Omni
// fixture's feature extractor (cut to 10 s), and the placeholders of a prompt made from the
// parts are widened (models/placeholders.h).
// The raw input is also fed to the base64 decoder and the template's content-loop detection.
// Every outcome must be a result or an ApiError with a 4xx status; nothing may throw.
#include <cstdint>
#include <string>
#include <vector>

#include "audio/audio_prompt.h"
#include "core/check.h"
#include "models/placeholders.h"
#include "server/chat_content.h"
#include "server/media_url.h"
#include "vision/image_prompt.h"

namespace {

constexpr int32_t kImagePad = 290;  // the fixtures' <|image_pad|> / <|IMAGE|>
constexpr int32_t kAudio = 292;     // the Omni fixture's <|AUDIO|>

const qs::vision::Qwen2VLImageConfig& processor() {
  static const qs::vision::Qwen2VLImageConfig config = [] {
    auto c = qs::vision::load_qwen2_vl_image_config(QS_SOURCE_DIR
                                                    "/tests/golden/fixtures/vl/qwen2_5_vl");
    QS_CHECK(c.ok());
    return *c;
  }();
  return config;
}

qs::audio::AudioPromptConfig clips() {
  qs::audio::AudioPromptConfig c;
  c.audio_token_id = kAudio;
  c.features.n_mels = 128;
  c.features.chunk_length = 10;  // Omni's 300 s would let one input decode for seconds
  c.features.n_samples = 160000;
  c.features.nb_max_frames = 1000;
  return c;
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
    const auto e = parse_chat_messages(
        messages, openai_format,
        {"<|image_pad|>", "<|audio_bos|><|AUDIO|><|audio_eos|>", "<|video_pad|>"}, &chat);
    check_error(e);
    if (e) continue;
    QS_CHECK(chat.messages.size() == messages.size());
    if (!openai_format) continue;
    std::vector<qs::models::PlaceholderItem> items;
    size_t n_images = 0, n_clips = 0;
    qs::vision::ImagePromptConfig image_config;
    image_config.image_token_id = kImagePad;
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
      items.push_back(qs::vision::image_placeholder(*image, image_config));
      ++n_images;
    }
    static const qs::audio::AudioPromptConfig clip_config = clips();
    for (const std::string& url : chat.audio_urls) {
      std::string bytes;
      const auto load = load_media_url(url, /*allowed_local_dir=*/"", &bytes);
      check_error(load);
      if (load) continue;
      auto clip = qs::audio::prepare_prompt_audio(bytes, "fuzz", clip_config);
      if (!clip.ok()) continue;
      QS_CHECK(clip->n_tokens > 0 && clip->hash != 0 && clip->frames <= 1000);
      QS_CHECK(static_cast<int64_t>(clip->features->size()) == clip->frames * 128);
      items.push_back(qs::audio::audio_placeholder(*clip, clip_config));
      ++n_clips;
    }
    // A prompt with the loaded clips' placeholders, then the images', between text tokens.
    std::vector<int32_t> ids = {1};
    for (size_t i = 0; i < n_clips; ++i) ids.insert(ids.end(), {293, kAudio, 294});
    for (size_t i = 0; i < n_images; ++i) ids.insert(ids.end(), {288, kImagePad, 289});
    const qs::models::PlaceholderKind kinds[] = {{kImagePad, "image"}, {kAudio, "audio"}};
    const size_t n_items = items.size();
    auto widened = qs::models::expand_placeholders(&ids, kinds, std::move(items));
    QS_CHECK(widened.ok() && widened->size() == n_items);
    for (const auto& item : *widened) {
      QS_CHECK(ids.at(static_cast<size_t>(item.offset)) == (item.audio ? kAudio : kImagePad));
    }
  }
  return 0;
}
