// unit: videos into prompts: the video processor's config (class defaults, "size" and
// min/max_pixels, the files transformers looks in and their order, bad fields named), the
// sampler's refusals, <|video_pad|> expansion into video items, seconds per temporal patch
// as Qwen2.5-VL and Qwen2.5-Omni compute it, and the padding of an odd frame count.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "vision/qwen2_vl_video_processor.h"
#include "vision/video_prompt.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kVideo = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/video";

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(VideoConfig, ClassDefaultsAndOverrides) {
  auto c = vision::parse_qwen2_vl_video_config(json::object(), "cfg");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->image.min_pixels, 128 * 28 * 28);
  EXPECT_EQ(c->image.max_pixels, 28 * 28 * 768);
  EXPECT_EQ(c->min_frames, 4);
  EXPECT_EQ(c->max_frames, 768);
  EXPECT_FALSE(c->do_sample_frames);
  EXPECT_FALSE(c->fps.has_value());
  // A checkpoint's preprocessor_config.json (image fields): min/max_pixels win over size.
  c = vision::parse_qwen2_vl_video_config(
      json{{"min_pixels", 3136}, {"max_pixels", 12845056}, {"size", {{"shortest_edge", 1}}}},
      "cfg");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->image.min_pixels, 3136);
  EXPECT_EQ(c->image.max_pixels, 12845056);
  // A size with one edge keeps the other's video default.
  c = vision::parse_qwen2_vl_video_config(json{{"size", {{"longest_edge", 200704}}}}, "cfg");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->image.min_pixels, 128 * 28 * 28);
  EXPECT_EQ(c->image.max_pixels, 200704);
  c = vision::parse_qwen2_vl_video_config(
      json{{"fps", 1.5}, {"do_sample_frames", true}, {"min_frames", 2}, {"max_frames", 64}}, "cfg");
  ASSERT_TRUE(c.ok());
  EXPECT_DOUBLE_EQ(*c->fps, 1.5);
  EXPECT_TRUE(c->do_sample_frames);
  EXPECT_EQ(c->max_frames, 64);
}

TEST(VideoConfig, BadFieldsAreNamed) {
  const std::pair<json, const char*> bad[] = {
      {json{{"fps", 0}}, "'fps'"},
      {json{{"fps", "2"}}, "'fps'"},
      {json{{"min_frames", 10}, {"max_frames", 5}}, "min_frames"},
      {json{{"do_sample_frames", 1}}, "do_sample_frames"},
      {json{{"max_video_tokens", -1}}, "max_video_tokens"},
      {json{{"temporal_patch_size", 0}}, "temporal_patch_size"},
      {json{{"resample", 2}}, "resample"},
      {json::array(), "JSON object"},
  };
  for (const auto& [value, field] : bad) {
    auto c = vision::parse_qwen2_vl_video_config(value, "vp.json");
    ASSERT_FALSE(c.ok()) << value.dump();
    EXPECT_NE(c.status().message().find(field), std::string::npos) << c.status().message();
    EXPECT_NE(c.status().message().find("vp.json"), std::string::npos);
  }
}

TEST(VideoConfig, FilesInTransformersOrder) {
  const fs::path dir = fs::temp_directory_path() / "qs_video_config_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto write = [&](const char* file, const json& v) { std::ofstream(dir / file) << v.dump(); };
  auto load = [&] { return vision::load_qwen2_vl_video_config(dir.string()); };
  ASSERT_TRUE(load().ok());
  EXPECT_EQ(load()->image.min_pixels, 128 * 28 * 28);  // no file: the class defaults
  write("preprocessor_config.json", json{{"min_pixels", 3136}});
  EXPECT_EQ(load()->image.min_pixels, 3136);
  write("video_preprocessor_config.json", json{{"min_pixels", 6272}});
  EXPECT_EQ(load()->image.min_pixels, 6272);
  write("processor_config.json", json{{"video_processor", {{"min_pixels", 12544}}}});
  EXPECT_EQ(load()->image.min_pixels, 12544);
  write("video_preprocessor_config.json", json{{"max_frames", "many"}});
  write("processor_config.json", json{{"image_processor", json::object()}});
  auto bad = load();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("video_preprocessor_config.json"), std::string::npos);
  fs::remove_all(dir);
}

TEST(VideoSampling, Refusals) {
  vision::Qwen2VLVideoConfig c;
  c.do_sample_frames = true;
  c.fps = 2.0;
  auto r = vision::qwen2_vl_sample_frames(1, 30.0, c);  // transformers divides by zero here
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("too short"), std::string::npos);
  EXPECT_FALSE(vision::qwen2_vl_sample_frames(100, 0.0, c).ok());  // no rate to sample by
  c.num_frames = 8;
  EXPECT_NE(vision::qwen2_vl_sample_frames(100, 30.0, c).status().message().find("exclusive"),
            std::string::npos);
  c.fps.reset();
  c.num_frames = 200;
  EXPECT_FALSE(vision::qwen2_vl_sample_frames(100, 30.0, c).ok());
  // Without sampling every frame is kept, sampling settings or not.
  c.do_sample_frames = false;
  EXPECT_EQ(vision::qwen2_vl_sample_frames(3, 30.0, c)->size(), 3u);
}

TEST(VideoPrompt, SecondsPerPatchAndPadding) {
  const std::string mov = file_bytes(kVideo / "pattern_rgb.mov");  // 13 frames at 6 fps
  vision::Qwen2VLVideoConfig config;
  config.image.min_pixels = 3136;
  vision::VideoPromptOptions options;  // fps 2: 4 frames of 13 -> sampled rate 24/13
  auto v = vision::prepare_prompt_video(mov, "rgb.mov", config, options);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->frame_indices, (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_DOUBLE_EQ(v->grid.seconds_per_t, 2.0 / (4.0 / 13.0 * 6.0));
  EXPECT_EQ(v->n_frames, 13);
  EXPECT_FALSE(v->has_audio);
  options.seconds = vision::SecondsPerPatch::kRequestedFps;  // Omni: 2 / fps asked
  v = vision::prepare_prompt_video(mov, "rgb.mov", config, options);
  ASSERT_TRUE(v.ok());
  EXPECT_DOUBLE_EQ(v->grid.seconds_per_t, 1.0);
  // Every frame: 13 padded to 14 with the last, 7 temporal patches; the last patch's two
  // frames are equal, so its rows repeat their first half.
  options.fps.reset();
  v = vision::prepare_prompt_video(mov, "rgb.mov", config, options);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->grid.t, 7);
  const int64_t dim = 3 * 2 * 14 * 14, plane = 14 * 14;
  const float* last = v->pixels->data() + (v->grid.t * v->grid.h * v->grid.w - 1) * dim;
  for (int64_t k = 0; k < plane; ++k) EXPECT_EQ(last[k], last[plane + k]);
  options.fps = -1.0;
  EXPECT_FALSE(vision::prepare_prompt_video(mov, "rgb.mov", config, options).ok());
}

TEST(VideoPrompt, AVideoBecomesAPlaceholderItemWithItsSecondsPerPatch) {
  vision::PromptVideo a;
  a.n_tokens = 3;
  a.grid = {2, 2, 3, 0.5};
  a.hash = 11;
  vision::VideoPromptConfig config;
  config.video_token_id = 151656;
  const models::PlaceholderItem item = vision::video_placeholder(a, config);
  EXPECT_EQ(item.token_id, 151656);
  EXPECT_EQ(item.n_tokens, 3);
  EXPECT_TRUE(item.item.video);
  EXPECT_FALSE(item.item.audio_in_video());
  EXPECT_DOUBLE_EQ(item.item.grid.seconds_per_t, 0.5);
  EXPECT_EQ(item.item.hash, 11u);
}

}  // namespace
}  // namespace qs
