// golden: videos through the chat API's request path against transformers
// (tests/golden/fixtures/video/chat_reference.json, made by gen_video_chat_fixtures.py): a
// message with tests/golden/fixtures/video/pattern_rgb.mov as a video_url data URL, on the tiny
// Qwen2.5-VL and on the tiny Qwen2.5-Omni thinker, renders through the checkpoint's chat
// template, samples at 2 frames a second, and gives the processor's ids (<|video_pad|> /
// <|VIDEO|> widened), pixel_values_videos, grid and seconds per temporal patch (VL: 2 / the
// sampled rate; Omni: 2 / the requested fps, at the Omni processor's own video size), and the
// engine's greedy tokens equal generate()'s; `generate --video` prints the same text.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../common/cli.h"
#include "../common/engine_runner.h"
#include "../common/reference_tensors.h"
#include "audio/audio_prompt.h"
#include "audio/qwen2_5_omni_audio.h"
#include "core/json.h"
#include "models/model.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "vision/image_prompt.h"
#include "vision/qwen2_5_vl_vision.h"
#include "vision/video_prompt.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using server::Json;
const fs::path kRoot = fs::path(QS_SOURCE_DIR);
const fs::path kDir = kRoot / "tests/golden/fixtures/video";

// What serve loads beside the decoder (apps/media_inputs.cc), loaded the same way here.
struct Served {
  std::unique_ptr<models::Model> model;
  std::unique_ptr<vision::Qwen25VisionTower> vision;
  std::unique_ptr<audio::Qwen25OmniAudioTower> audio;
  vision::ImagePromptConfig images;
  vision::VideoPromptConfig videos;
  audio::AudioPromptConfig clips;
  std::unique_ptr<tok::Tokenizer> tokenizer;
  std::unique_ptr<tok::ChatTemplate> chat;
  server::ModelInfo info;
};

void load(const std::string& dir, Served* s) {
  auto m = models::Model::load(dir);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  s->model = std::move(*m);
  const models::ModelConfig& config = s->model->config();
  auto v = vision::Qwen25VisionTower::load(dir);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  s->vision = std::make_unique<vision::Qwen25VisionTower>(std::move(*v));
  auto images = vision::load_image_prompt_config(dir, config);
  ASSERT_TRUE(images.ok()) << images.status().to_string();
  s->images = *images;
  auto videos = vision::load_video_prompt_config(dir, config);
  ASSERT_TRUE(videos.ok()) << videos.status().to_string();
  s->videos = *videos;
  if (config.audio_token_id >= 0) {
    auto a = audio::Qwen25OmniAudioTower::load(dir);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    s->audio = std::make_unique<audio::Qwen25OmniAudioTower>(std::move(*a));
    auto clips = audio::load_audio_prompt_config(dir, config);
    ASSERT_TRUE(clips.ok()) << clips.status().to_string();
    s->clips = *clips;
    s->info.audio = &s->clips;
  }
  auto tk = tok::load_tokenizer(dir);
  ASSERT_TRUE(tk.ok()) << tk.status().to_string();
  s->tokenizer = std::move(*tk);
  auto ct = tok::ChatTemplate::from_model_dir(dir);
  ASSERT_TRUE(ct.ok()) << ct.status().to_string();
  s->chat = std::make_unique<tok::ChatTemplate>(std::move(*ct));
  s->info.served_model_name = "video";
  s->info.max_model_len = 512;
  s->info.vocab_size = 300;
  s->info.tokenizer = s->tokenizer.get();
  s->info.chat_template = s->chat.get();
  s->info.images = &s->images;
  s->info.videos = &s->videos;
}

class VideoChat : public ::testing::Test {
 protected:
  void SetUp() override {
    auto meta = read_json((kDir / "chat_reference.json").string());
    ASSERT_TRUE(meta.ok());
    meta_ = *meta;
  }
  // The case's messages with its {"type": "video"} part as a video_url.
  std::string body(const std::string& c, const std::string& url,
                   const Json& kwargs = nullptr) const {
    Json messages = Json::parse(meta_.at(c).at("messages").dump());
    for (auto& m : messages) {
      if (!m["content"].is_array()) continue;
      for (auto& part : m["content"]) {
        if (part["type"] == "video") part = {{"type", "video_url"}, {"video_url", {{"url", url}}}};
      }
    }
    Json b = {{"messages", messages}, {"temperature", 0}, {"max_tokens", 8}};
    if (!kwargs.is_null()) b["mm_processor_kwargs"] = kwargs;
    return b.dump();
  }
  std::string video_url(const std::string& file = "pattern_rgb.mov") const {
    return "data:video/mp4;base64," + server::base64_encode(testing::slurp((kDir / file).string()));
  }
  nlohmann::json meta_;
  testing::ReferenceTensors ref_{(kDir / "chat_reference.safetensors").string()};
  ThreadPool pool_{2};
};

TEST_F(VideoChat, VideoPartsGiveTransformersIdsPixelsAndGreedyTokens) {
  for (const std::string c : {"vl_video", "omni_video", "omni_video_audio"}) {
    SCOPED_TRACE(c);
    const nlohmann::json& m = meta_.at(c);
    Served s;
    load((kRoot / m.at("model").get<std::string>()).string(), &s);
    // The sound-track case as vLLM is asked for it: mm_processor_kwargs.
    const bool heard = m.at("use_audio_in_video").get<bool>();
    const Json kwargs = heard ? Json{{"use_audio_in_video", true}, {"fps", m.at("fps")}} : Json();
    server::GenerationRequest r;
    auto e = server::parse_generation_request(
        server::Endpoint::kChat, body(c, video_url(m.at("video").get<std::string>()), kwargs),
        s.info, &r);
    ASSERT_FALSE(e) << e->message;
    const server::Prompt& p = r.prompts.at(0);
    EXPECT_EQ(p.text, meta_.at(c).at("text").get<std::string>());
    ASSERT_EQ(p.ids, ref_.i32(c + "_ids"));
    ASSERT_EQ(p.mm_items.size(), 1u);
    const models::MultimodalItem& v = p.mm_items[0];
    EXPECT_TRUE(v.video);
    const std::vector<int32_t> g = ref_.i32(c + "_grid_thw");
    EXPECT_EQ(v.grid.t, g[0]);
    EXPECT_EQ(v.grid.h, g[1]);
    EXPECT_EQ(v.grid.w, g[2]);
    // float32 in transformers: compare at its precision.
    EXPECT_NEAR(v.grid.seconds_per_t, meta_.at(c).at("second_per_grid_ts")[0].get<double>(), 1e-6);
    // Every row, or the rows the fixture keeps and the sums of all of them.
    const std::vector<float> want = ref_.f32(c + "_pixel_values");
    const nlohmann::json& rows = meta_.at(c).at("pixel_rows");
    const int64_t width =
        v.grid.t * v.grid.h * v.grid.w == 0
            ? 0
            : static_cast<int64_t>(v.pixels->size()) / (v.grid.t * v.grid.h * v.grid.w);
    ASSERT_EQ(static_cast<int64_t>(want.size()), static_cast<int64_t>(rows.size()) * width);
    float max_diff = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      const float* got = v.pixels->data() + rows[i].get<int64_t>() * width;
      for (int64_t k = 0; k < width; ++k)
        max_diff = std::max(max_diff, std::abs(got[k] - want[i * width + k]));
    }
    // The lossless clip: float rounding only; H.264: Debian's and PyAV's decoders agree.
    EXPECT_LE(max_diff, 1e-5f);
    double sum = 0, abs_sum = 0;
    for (const float x : *v.pixels) {
      sum += x;
      abs_sum += std::abs(x);
    }
    const double n = static_cast<double>(v.pixels->size());
    EXPECT_NEAR(sum, meta_.at(c).at("pixel_sum").get<double>(), 1e-5 * n);
    EXPECT_NEAR(abs_sum, meta_.at(c).at("pixel_abs_sum").get<double>(), 1e-5 * n);
    EXPECT_EQ(v.audio_in_video(), heard);
    if (heard) {
      // The track's frames, decoded from the MP4 by FFmpeg here and by PyAV there.
      const std::vector<float> f = ref_.f32(c + "_features");
      ASSERT_EQ(v.features->size(), f.size());
      float fdiff = 0;
      for (size_t i = 0; i < f.size(); ++i)
        fdiff = std::max(fdiff, std::abs((*v.features)[i] - f[i]));
      EXPECT_LE(fdiff, 1e-4f);
      std::printf("%s: sound track of %lld frames, max |features - transformers'| %.3g\n",
                  c.c_str(), static_cast<long long>(v.frames), fdiff);
    }
    engine::EngineConfig cfg;
    cfg.vision = s.vision.get();
    cfg.audio = s.audio.get();
    auto engine = testing::make_engine(*s.model, s.tokenizer.get(), {}, pool_, 1024, cfg);
    engine::EngineRequest req = testing::greedy_request("r", p.ids, 8);
    req.params.ignore_eos = true;
    req.mm_items = p.mm_items;
    const Status added = engine->add_request(std::move(req));
    ASSERT_TRUE(added.ok()) << added.to_string();
    const auto done = testing::run_to_completion(*engine);
    EXPECT_EQ(done.at("r").ids, ref_.i32(c + "_greedy"));
  }
}

TEST_F(VideoChat, GenerateWithAVideoPrintsTheSameCompletion) {
  const testing::CliResult out = testing::run_cli(
      "generate --model " + (kRoot / "tests/golden/fixtures/vl/qwen2_5_vl").string() +
          " --prompt 'What moves?' --video " + (kDir / "pattern_rgb.mov").string() +
          " --max-tokens 8 --temperature 0 --ignore-eos --threads 2",
      /*stderr_too=*/false);
  ASSERT_EQ(out.exit_code, 0) << out.output;
  EXPECT_EQ(out.output, meta_.at("vl_video").at("greedy_text").get<std::string>());
}

TEST_F(VideoChat, BadVideosAndLimitsAre400s) {
  Served s;
  load((kRoot / "tests/golden/fixtures/vl/qwen2_5_vl").string(), &s);
  auto reject = [&](const std::string& b, const std::string& what) {
    server::GenerationRequest r;
    auto e = server::parse_generation_request(server::Endpoint::kChat, b, s.info, &r);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->http_status, 400);
    EXPECT_NE(e->message.find(what), std::string::npos) << e->message;
  };
  const std::string mov = testing::slurp((kDir / "pattern_rgb.mov").string());
  reject(body("vl_video",
              "data:video/mp4;base64," + server::base64_encode(mov.substr(0, mov.size() / 3))),
         "Invalid video");
  reject(
      body("vl_video", "data:video/mp4;base64," + server::base64_encode("plain text, not a video")),
      "Invalid video");
  reject(body("vl_video", "data:video/mp4;base64,@@@@"), "not valid base64");
  reject(body("vl_video", "https://example.com/a.mp4"), "does not fetch");
  s.info.media.max_videos_per_prompt = 0;
  reject(body("vl_video", video_url()), "At most 0 videos");
  s.info.media.max_videos_per_prompt = 16;
  reject(body("vl_video", video_url(), Json{{"use_audio_in_video", true}}), "no audio tower");
  reject(body("vl_video", video_url(), Json{{"size", 3}}), "not supported");
  reject(body("vl_video", video_url(), Json{{"fps", 0}}), "fps");
  reject(body("vl_video", video_url(), Json{{"use_audio_in_video", "yes"}}), "boolean");
  s.info.media.max_videos_per_prompt = 16;
  s.info.videos = nullptr;
  reject(body("vl_video", video_url()), "does not accept videos");
}

}  // namespace
}  // namespace qs
