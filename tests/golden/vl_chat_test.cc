// golden: images through the chat API's request path on the tiny Qwen2.5-VL of
// tests/golden/fixtures/vl against transformers (chat_reference.json, made by
// gen_vl_fixtures.py): chat messages with the committed images as data URLs render through the
// checkpoint's chat template, and after each <|image_pad|> is expanded to its grid the prompt
// ids equal the processor's, the pixel values its pixel_values, and the engine's greedy tokens
// generate()'s; `generate --image` prints the same completion. Bad images and limits are 400s.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../common/cli.h"
#include "../common/engine_runner.h"
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
const fs::path kDir = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/vl";
const fs::path kModel = kDir / "qwen2_5_vl";

std::string data_url(const fs::path& file) {
  return "data:image/png;base64," + server::base64_encode(testing::slurp(file.string()));
}

class VlChat : public ::testing::Test {
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
    tower_ = std::make_unique<vision::Qwen25VisionTower>(std::move(*t));
    auto tk = tok::load_tokenizer(kModel.string());
    ASSERT_TRUE(tk.ok()) << tk.status().to_string();
    tokenizer_ = std::move(*tk);
    auto ct = tok::ChatTemplate::from_model_dir(kModel.string());
    ASSERT_TRUE(ct.ok()) << ct.status().to_string();
    chat_ = std::make_unique<tok::ChatTemplate>(std::move(*ct));
    auto images = vision::load_image_prompt_config(kModel.string(), model_->config());
    ASSERT_TRUE(images.ok()) << images.status().to_string();
    images_ = *images;
    info_.served_model_name = "vl";
    info_.max_model_len = 512;
    info_.vocab_size = 300;
    info_.tokenizer = tokenizer_.get();
    info_.chat_template = chat_.get();
    info_.images = &images_;
  }
  std::vector<int32_t> i32(const std::string& n) {
    const Tensor& t = ref_->at(n);
    return {t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel()};
  }
  // The reference case's messages as an OpenAI body: each {"type": "image"} the next of its
  // images as a data URL.
  std::string chat_body(const std::string& c) {
    const nlohmann::json& ref = meta_->at(c);
    Json messages = Json::parse(ref.at("messages").dump());
    size_t next = 0;
    for (auto& m : messages) {
      if (!m["content"].is_array()) continue;
      for (auto& part : m["content"]) {
        if (part["type"] != "image") continue;
        const std::string file = ref.at("images").at(next++).get<std::string>();
        part = Json{{"type", "image_url"}, {"image_url", {{"url", data_url(kDir / file)}}}};
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
  std::string one_image_body(const std::string& url, const std::string& type = "image_url") {
    return Json{{"messages",
                 {{{"role", "user"},
                   {"content",
                    {{{"type", type}, {"image_url", {{"url", url}}}},
                     {{"type", "text"}, {"text", "hi"}}}}}}}}
        .dump();
  }

  static inline std::shared_ptr<MappedFile>* file_ = nullptr;
  static inline std::map<std::string, Tensor>* ref_ = nullptr;
  static inline nlohmann::json* meta_ = nullptr;
  std::unique_ptr<models::Model> model_;
  std::unique_ptr<vision::Qwen25VisionTower> tower_;
  std::unique_ptr<tok::Tokenizer> tokenizer_;
  std::unique_ptr<tok::ChatTemplate> chat_;
  vision::ImagePromptConfig images_;
  server::ModelInfo info_;
  ThreadPool pool_{2};
};

TEST_F(VlChat, ChatRequestsGiveTransformersIdsPixelsAndGreedyTokens) {
  for (const std::string c : {"chat_one_image", "chat_two_images"}) {
    SCOPED_TRACE(c);
    server::GenerationRequest r;
    auto e = server::parse_generation_request(server::Endpoint::kChat, chat_body(c), info_, &r);
    ASSERT_FALSE(e) << e->message;
    const server::Prompt& p = r.prompts.at(0);
    EXPECT_EQ(p.text, meta_->at(c).at("text").get<std::string>());
    ASSERT_EQ(p.ids, i32(c + "_ids"));
    // Pixel values and grids, image after image.
    const std::vector<float> want = ref_->at(c + "_pixel_values").to_f32();
    const std::vector<int32_t> grids = i32(c + "_grid_thw");
    std::vector<float> got;
    ASSERT_EQ(p.mm_items.size() * 3, grids.size());
    for (size_t i = 0; i < p.mm_items.size(); ++i) {
      const models::MultimodalItem& it = p.mm_items[i];
      EXPECT_EQ(it.grid.t, grids[3 * i]);
      EXPECT_EQ(it.grid.h, grids[3 * i + 1]);
      EXPECT_EQ(it.grid.w, grids[3 * i + 2]);
      EXPECT_EQ(p.ids[it.offset], 290);
      EXPECT_EQ(p.ids[it.offset - 1], 288);
      got.insert(got.end(), it.pixels->begin(), it.pixels->end());
    }
    ASSERT_EQ(got.size(), want.size());
    float max_diff = 0;
    for (size_t i = 0; i < got.size(); ++i)
      max_diff = std::max(max_diff, std::abs(got[i] - want[i]));
    EXPECT_LE(max_diff, 1e-6f);
    // The engine, as the server submits it.
    engine::EngineConfig cfg;
    cfg.vision = tower_.get();
    auto engine = testing::make_engine(*model_, tokenizer_.get(), {}, pool_, 512, cfg);
    engine::EngineRequest req = testing::greedy_request("r", p.ids, 8);
    req.params.ignore_eos = true;
    req.mm_items = p.mm_items;
    ASSERT_TRUE(engine->add_request(std::move(req)).ok());
    const auto done = testing::run_to_completion(*engine);
    EXPECT_EQ(done.at("r").ids, i32(c + "_greedy"));
    // /tokenize with the same messages counts the expanded prompt.
    server::TokenizeRequest t;
    ASSERT_FALSE(server::parse_tokenize_request(chat_body(c), info_, &t));
    EXPECT_EQ(t.ids, p.ids);
  }
}

TEST_F(VlChat, GenerateWithAnImagePrintsTheSameCompletion) {
  const testing::CliResult out = testing::run_cli(
      "generate --model " + kModel.string() + " --prompt 'Describe this image.' --image " +
          (kDir / "chat_image_a.png").string() +
          " --max-tokens 8 --temperature 0 --ignore-eos --threads 2",
      /*stderr_too=*/false);
  ASSERT_EQ(out.exit_code, 0) << out.output;
  EXPECT_EQ(out.output, meta_->at("chat_one_image").at("greedy_text").get<std::string>());
  // A text model refuses --image by name.
  const fs::path stories = fs::path(QS_SOURCE_DIR) / "models/stories260K";
  if (!fs::exists(stories)) GTEST_SKIP() << stories << " is not imported";
  const testing::CliResult text =
      testing::run_cli("generate --model " + stories.string() + " --prompt hi --image " +
                       (kDir / "chat_image_a.png").string());
  EXPECT_NE(text.exit_code, 0);
  EXPECT_NE(text.output.find("no vision tower"), std::string::npos) << text.output;
}

TEST_F(VlChat, BadImagesAndLimitsAre400s) {
  const std::string a = data_url(kDir / "chat_image_a.png");
  auto has = [](const server::ApiError& e, const std::string& what) {
    EXPECT_EQ(e.http_status, 400);
    EXPECT_NE(e.message.find(what), std::string::npos) << e.message;
  };
  const std::string png = testing::slurp((kDir / "chat_image_a.png").string());
  has(reject(one_image_body("data:image/png;base64," +
                            server::base64_encode(png.substr(0, png.size() / 2)))),
      "Invalid image");
  has(reject(one_image_body(data_url(fs::path(QS_SOURCE_DIR) /
                                     "tests/golden/fixtures/vision/huge_header_30000x30000.png"))),
      "30000x30000");
  has(reject(one_image_body("data:image/png;base64,not base64!")), "not valid base64");
  has(reject(one_image_body("https://example.com/a.png")), "does not fetch remote media");
  has(reject(one_image_body(a, "image_embeds")), "not supported");
  has(reject(one_image_body(a, "mystery")), "Unknown part type");
  info_.media.max_images_per_prompt = 1;
  has(reject(chat_body("chat_two_images")), "At most 1 images");
  info_.media.max_images_per_prompt = 16;
  // Text naming <|image_pad|> itself leaves the images and placeholders uneven.
  has(reject(Json{{"messages",
                   {{{"role", "user"},
                     {"content",
                      {{{"type", "image_url"}, {"image_url", {{"url", a}}}},
                       {{"type", "text"}, {"text", "<|image_pad|>"}}}}}}}}
                 .dump()),
      "placeholder");
  info_.images = nullptr;
  has(reject(one_image_body(a)), "does not accept images");
  // Text alone still works on both.
  server::GenerationRequest r;
  EXPECT_FALSE(server::parse_generation_request(
      server::Endpoint::kChat, R"({"messages": [{"role": "user", "content": "hi"}]})", info_, &r));
}

}  // namespace
}  // namespace qs
