// tests: images into a prompt (vision/image_prompt.h): an image's placeholder item, the source
// hash, and a committed PNG processed into its grid and tokens
// with the fixture checkpoint's preprocessor config; corrupt and refused images are errors.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/content_hash.h"
#include "core/mmap_file.h"
#include "vision/image_prompt.h"

namespace qs::vision {
namespace {

namespace fs = std::filesystem;
const fs::path kVl = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/vl";

TEST(ImagePrompt, AnImageBecomesAPlaceholderItemOfItsGrid) {
  PromptImage p;
  p.grid = {1, 4, 6};
  p.n_tokens = 6;
  p.hash = 11;
  p.pixels = std::make_shared<const std::vector<float>>(24, 0.0f);
  ImagePromptConfig config;
  config.image_token_id = 290;
  const models::PlaceholderItem item = image_placeholder(p, config);
  EXPECT_EQ(item.token_id, 290);
  EXPECT_EQ(item.n_tokens, 6);
  EXPECT_FALSE(item.item.video || item.item.audio);
  EXPECT_EQ(item.item.grid.w, 6);
  EXPECT_EQ(item.item.hash, 11u);
  EXPECT_EQ(item.item.pixels, p.pixels);
}

TEST(ImagePrompt, HashIsOfTheBytesAndNeverZero) {
  EXPECT_EQ(content_hash("abc"), content_hash("abc"));
  EXPECT_NE(content_hash("abc"), content_hash("abd"));
  EXPECT_EQ(content_hash(""), 14695981039346656037ull);
}

TEST(ImagePrompt, FixtureImageGivesItsGridAndTokens) {
  auto config = load_qwen2_vl_image_config((kVl / "qwen2_5_vl").string());
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  auto bytes = read_file((kVl / "chat_image_a.png").string());
  ASSERT_TRUE(bytes.ok());
  auto image = prepare_prompt_image(*bytes, "a.png", *config);
  ASSERT_TRUE(image.ok()) << image.status().to_string();
  EXPECT_EQ(image->width, 60);
  EXPECT_EQ(image->height, 40);
  EXPECT_EQ(image->grid.h, 4);  // 40 x 60 grows to 56 x 84 (min_pixels 3136)
  EXPECT_EQ(image->grid.w, 6);
  EXPECT_EQ(image->n_tokens, 6);
  EXPECT_EQ(image->pixels->size(), 24u * 1176u);
  EXPECT_EQ(image->hash, content_hash(*bytes));
  // Cut short, or not an image: errors naming it.
  auto cut = prepare_prompt_image(bytes->substr(0, bytes->size() / 2), "cut.png", *config);
  EXPECT_FALSE(cut.ok());
  auto junk = prepare_prompt_image("not an image", "junk", *config);
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find("junk"), std::string::npos);
}

}  // namespace
}  // namespace qs::vision
