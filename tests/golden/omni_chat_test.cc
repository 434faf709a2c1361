// golden: images and sound clips through the chat API's request path on the tiny Qwen2.5-Omni
// thinker of tests/golden/fixtures/omni against transformers (chat_reference.json, made by
// gen_omni_chat_fixtures.py): OpenAI messages with an image as a data URL and a clip as
// input_audio render through the checkpoint's chat template, and after <|IMAGE|> and <|AUDIO|>
// are widened the prompt ids equal Qwen2_5OmniProcessor's, the clip's log-mel frames its
// masked input_features, and the engine's greedy tokens generate()'s; `generate --image --audio`
// prints the same completion. Bad clips, missing towers and limits are 400s.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../common/cli.h"
#include "../common/engine_runner.h"
#include "audio/audio_prompt.h"
#include "audio/qwen2_5_omni_audio.h"
#include "core/json.h"
#include "core/mmap_file.h"
#include "io/checkpoint.h"
#include "models/model.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "vision/image_prompt.h"
#include "vision/qwen2_5_vl_vision.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using server::Json;
const fs::path kDir = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/omni";
const fs::path kModel = kDir / "qwen2_5_omni_thinker";
const fs::path kImages = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/vl";
constexpr int32_t kImage = 290, kAudio = 292, kAudioBos = 293;

// A mono 16 kHz 16-bit WAV of `n` samples of a quiet ramp.
std::string pcm16_wav(uint32_t n) {
  std::string out;
  auto u32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  auto u16 = [&](uint16_t v) {
    out.push_back(static_cast<char>(v & 0xff));
    out.push_back(static_cast<char>(v >> 8));
  };
  out += "RIFF";
  u32(36 + 2 * n);
  out += "WAVEfmt ";
  u32(16);
  u16(1);  // PCM
  u16(1);  // mono
  u32(16000);
  u32(32000);
  u16(2);
  u16(16);
  out += "data";
  u32(2 * n);
  for (uint32_t i = 0; i < n; ++i) u16(static_cast<uint16_t>(i * 7));
  return out;
}

std::string b64(const fs::path& file) {
  return server::base64_encode(testing::slurp(file.string()));
}

class OmniChat : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto file = MappedFile::open((kDir / "chat_reference.safetensors").string());
    ASSERT_TRUE(file.ok());
    file_ = new std::shared_ptr<MappedFile>(*file);
    std::vector<std::pair<std::string, Tensor>> tensors;
    ASSERT_TRUE(io::read_safetensors(*file_, &tensors, nullptr).ok());
    ref_ = new std::map<std::string, Tensor>(tensors.begin(), tensors.end());
    auto meta = read_json((kDir / "chat_reference.json").string());
    ASSERT_TRUE(meta.ok());
    meta_ = new nlohmann::json(*meta);
  }
  void SetUp() override {
    auto m = models::Model::load(kModel.string());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
    auto t = vision::Qwen25VisionTower::load(kModel.string());
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    vision_ = std::make_unique<vision::Qwen25VisionTower>(std::move(*t));
    auto a = audio::Qwen25OmniAudioTower::load(kModel.string());
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    audio_ = std::make_unique<audio::Qwen25OmniAudioTower>(std::move(*a));
    auto tk = tok::load_tokenizer(kModel.string());
    ASSERT_TRUE(tk.ok()) << tk.status().to_string();
    tokenizer_ = std::move(*tk);
    auto ct = tok::ChatTemplate::from_model_dir(kModel.string());
    ASSERT_TRUE(ct.ok()) << ct.status().to_string();
    chat_ = std::make_unique<tok::ChatTemplate>(std::move(*ct));
    auto images = vision::load_image_prompt_config(kModel.string(), model_->config());
    ASSERT_TRUE(images.ok()) << images.status().to_string();
    images_ = *images;
    auto clips = audio::load_audio_prompt_config(kModel.string(), model_->config());
    ASSERT_TRUE(clips.ok()) << clips.status().to_string();
    clips_ = *clips;
    info_.served_model_name = "omni";
    info_.max_model_len = 512;
    info_.vocab_size = 300;
    info_.tokenizer = tokenizer_.get();
    info_.chat_template = chat_.get();
    info_.images = &images_;
    info_.audio = &clips_;
  }
  std::vector<int32_t> i32(const std::string& n) {
    const Tensor& t = ref_->at(n);
    return {t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel()};
  }
  // The reference case's messages as an OpenAI body: {"type": "image"} the next image as a
  // data URL, {"type": "audio"} the next clip as input_audio.
  std::string chat_body(const std::string& c) {
    const nlohmann::json& ref = meta_->at(c);
    Json messages = Json::parse(ref.at("messages").dump());
    size_t image = 0, clip = 0;
    for (auto& m : messages) {
      if (!m["content"].is_array()) continue;
      for (auto& part : m["content"]) {
        if (part["type"] == "image") {
          const std::string f = ref.at("images").at(image++).get<std::string>();
          part = Json{{"type", "image_url"},
                      {"image_url", {{"url", "data:image/png;base64," + b64(kImages / f)}}}};
        } else if (part["type"] == "audio") {
          const std::string f = ref.at("audio").at(clip++).get<std::string>();
          part = Json{{"type", "input_audio"},
                      {"input_audio", {{"data", b64(kDir / f)}, {"format", "wav"}}}};
        }
      }
    }
    return Json{{"messages", messages}, {"temperature", 0}, {"max_tokens", 8}}.dump();
  }
  server::ApiError reject(const std::string& body) {
    server::GenerationRequest r;
    auto e = server::parse_generation_request(server::Endpoint::kChat, body, info_, &r);
    EXPECT_TRUE(e.has_value()) << body.substr(0, 200);
    return e.value_or(server::ApiError{});
  }
  static Json audio_part(const std::string& data, const std::string& format = "wav") {
    return Json{{"type", "input_audio"}, {"input_audio", {{"data", data}, {"format", format}}}};
  }
  static std::string body_of(const std::vector<Json>& parts) {
    Json content = Json::array();
    for (const Json& part : parts) content.push_back(part);
    content.push_back({{"type", "text"}, {"text", "hi"}});
    return Json{{"messages", {{{"role", "user"}, {"content", content}}}}}.dump();
  }

  static inline std::shared_ptr<MappedFile>* file_ = nullptr;
  static inline std::map<std::string, Tensor>* ref_ = nullptr;
  static inline nlohmann::json* meta_ = nullptr;
  std::unique_ptr<models::Model> model_;
  std::unique_ptr<vision::Qwen25VisionTower> vision_;
  std::unique_ptr<audio::Qwen25OmniAudioTower> audio_;
  std::unique_ptr<tok::Tokenizer> tokenizer_;
  std::unique_ptr<tok::ChatTemplate> chat_;
  vision::ImagePromptConfig images_;
  audio::AudioPromptConfig clips_;
  server::ModelInfo info_;
  ThreadPool pool_{2};
};

TEST_F(OmniChat, ChatRequestsGiveTransformersIdsFeaturesAndGreedyTokens) {
  for (const std::string c : {"chat_image_audio", "chat_audio"}) {
    SCOPED_TRACE(c);
    server::GenerationRequest r;
    auto e = server::parse_generation_request(server::Endpoint::kChat, chat_body(c), info_, &r);
    ASSERT_FALSE(e) << e->message;
    const server::Prompt& p = r.prompts.at(0);
    EXPECT_EQ(p.text, meta_->at(c).at("text").get<std::string>());
    ASSERT_EQ(p.ids, i32(c + "_ids"));
    const bool has_image = meta_->at(c).at("images").size() == 1;
    ASSERT_EQ(p.mm_items.size(), has_image ? 2u : 1u);
    if (has_image) {
      const models::MultimodalItem& img = p.mm_items[0];
      EXPECT_FALSE(img.audio);
      EXPECT_EQ(p.ids[img.offset], kImage);
      const std::vector<float> want = ref_->at(c + "_pixel_values").to_f32();
      ASSERT_EQ(img.pixels->size(), want.size());
      float max_diff = 0;
      for (size_t i = 0; i < want.size(); ++i)
        max_diff = std::max(max_diff, std::abs((*img.pixels)[i] - want[i]));
      EXPECT_LE(max_diff, 1e-6f);
    }
    // The clip's frames, as the processor's WhisperFeatureExtractor padded them to 300 s and
    // its attention mask kept them.
    const models::MultimodalItem& clip = p.mm_items.back();
    ASSERT_TRUE(clip.audio);
    EXPECT_EQ(p.ids[clip.offset - 1], kAudioBos);
    EXPECT_EQ(p.ids[clip.offset], kAudio);
    EXPECT_EQ(clip.frames, meta_->at(c).at("audio_frames").get<int64_t>());
    const std::vector<float> want = ref_->at(c + "_features").to_f32();
    ASSERT_EQ(clip.features->size(), want.size());
    float max_diff = 0;
    for (size_t i = 0; i < want.size(); ++i)
      max_diff = std::max(max_diff, std::abs((*clip.features)[i] - want[i]));
    EXPECT_LE(max_diff, 1e-4f);  // f64 FFTW against numpy's f32 STFT (docs/audio.md)
    std::printf("%s: %lld frames, max |features - transformers'| %.3g\n", c.c_str(),
                static_cast<long long>(clip.frames), max_diff);
    // The engine, as the server submits it.
    engine::EngineConfig cfg;
    cfg.vision = vision_.get();
    cfg.audio = audio_.get();
    auto engine = testing::make_engine(*model_, tokenizer_.get(), {}, pool_, 512, cfg);
    engine::EngineRequest req = testing::greedy_request("r", p.ids, 8);
    req.params.ignore_eos = true;
    req.mm_items = p.mm_items;
    ASSERT_TRUE(engine->add_request(std::move(req)).ok());
    const auto done = testing::run_to_completion(*engine);
    EXPECT_EQ(done.at("r").ids, i32(c + "_greedy"));
  }
}

TEST_F(OmniChat, GenerateWithAnImageAndAClipPrintsTheSameCompletion) {
  const testing::CliResult out = testing::run_cli(
      "generate --model " + kModel.string() + " --prompt 'What do you see and hear?' --image " +
          (kImages / "chat_image_a.png").string() + " --audio " +
          (kDir / "chat_audio.wav").string() +
          " --max-tokens 8 --temperature 0 --ignore-eos --threads 2",
      /*stderr_too=*/false);
  ASSERT_EQ(out.exit_code, 0) << out.output;
  EXPECT_EQ(out.output, meta_->at("chat_image_audio").at("greedy_text").get<std::string>());
  // A vision-language model without ears refuses --audio by name.
  const testing::CliResult vl =
      testing::run_cli("generate --model " + (kImages / "qwen2_5_vl").string() +
                       " --prompt hi --audio " + (kDir / "chat_audio.wav").string());
  EXPECT_NE(vl.exit_code, 0);
  EXPECT_NE(vl.output.find("no audio tower"), std::string::npos) << vl.output;
}

TEST_F(OmniChat, BadClipsTowersAndLimitsAre400s) {
  auto has = [](const server::ApiError& e, const std::string& what) {
    EXPECT_EQ(e.http_status, 400);
    EXPECT_NE(e.message.find(what), std::string::npos) << e.message;
  };
  const std::string wav = testing::slurp((kDir / "chat_audio.wav").string());
  const std::string clip = server::base64_encode(wav);
  has(reject(body_of({audio_part(server::base64_encode(wav.substr(0, 30)))})), "Invalid audio");
  has(reject(body_of({audio_part(server::base64_encode("not a sound file at all"))})),
      "Invalid audio");
  has(reject(body_of({audio_part("not base64!")})), "not valid base64");
  has(reject(body_of({audio_part(clip, "../../etc")})), "format");
  has(reject(body_of({Json{{"type", "input_audio"}, {"input_audio", {{"data", clip}}}}})),
      "needs 'input_audio'");
  has(reject(body_of({Json{{"type", "audio_url"}, {"audio_url", "x"}}})), "needs 'audio_url'");
  has(reject(body_of(
          {Json{{"type", "audio_url"}, {"audio_url", {{"url", "https://example.com/a.wav"}}}}})),
      "does not fetch remote media");
  // Two hops of samples give two frames, too few for one embedding.
  has(reject(body_of({audio_part(server::base64_encode(pcm16_wav(320)))})), "too short");
  info_.media.max_audios_per_prompt = 1;
  has(reject(body_of({audio_part(clip), audio_part(clip)})), "At most 1 audio clips");
  info_.media.max_audios_per_prompt = 16;
  // Text naming <|AUDIO|> itself leaves the clips and placeholders uneven.
  has(reject(body_of({audio_part(clip), Json{{"type", "text"}, {"text", "<|AUDIO|>"}}})),
      "placeholder");
  info_.audio = nullptr;
  has(reject(body_of({audio_part(clip)})), "does not accept audio clips");
  // Text alone still works.
  server::GenerationRequest r;
  EXPECT_FALSE(server::parse_generation_request(
      server::Endpoint::kChat, R"({"messages": [{"role": "user", "content": "hi"}]})", info_, &r));
}

}  // namespace
}  // namespace qs
