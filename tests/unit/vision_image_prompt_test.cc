// tests: images into a prompt (vision/image_prompt.h): placeholder expansion (runs, offsets,
// the count check), the source hash, and a committed PNG processed into its grid and tokens
// with the fixture checkpoint's preprocessor config; corrupt and refused images are errors.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/mmap_file.h"
#include "vision/image_prompt.h"

namespace qs::vision {
namespace {

namespace fs = std::filesystem;
const fs::path kVl = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/vl";

PromptImage fake(int64_t h, int64_t w, uint64_t hash) {
  PromptImage p;
  p.grid = {1, h, w};
  p.n_tokens = h * w / 4;
  p.hash = hash;
  p.pixels = std::make_shared<const std::vector<float>>(h * w, 0.0f);
  return p;
}

TEST(ImagePrompt, PlaceholdersExpandToEachImagesRun) {
  std::vector<int32_t> ids = {1, 9, 288, 290, 289, 5, 288, 290, 289};
  const std::vector<PromptImage> images = {fake(4, 6, 11), fake(2, 2, 22)};
  auto items = expand_image_placeholders(&ids, 290, images);
  ASSERT_TRUE(items.ok()) << items.status().to_string();
  EXPECT_EQ(ids,
            (std::vector<int32_t>{1, 9, 288, 290, 290, 290, 290, 290, 290, 289, 5, 288, 290, 289}));
  ASSERT_EQ(items->size(), 2u);
  EXPECT_EQ((*items)[0].offset, 3);
  EXPECT_EQ((*items)[0].grid.w, 6);
  EXPECT_EQ((*items)[0].hash, 11u);
  EXPECT_EQ((*items)[1].offset, 12);
  EXPECT_EQ((*items)[1].pixels, images[1].pixels);
}

TEST(ImagePrompt, PlaceholderCountMustMatchTheImages) {
  std::vector<int32_t> ids = {290, 290};
  const std::vector<PromptImage> one = {fake(2, 2, 1)};
  EXPECT_FALSE(expand_image_placeholders(&ids, 290, one).ok());
  std::vector<int32_t> none = {1, 2};
  EXPECT_FALSE(expand_image_placeholders(&none, 290, one).ok());
  auto empty = expand_image_placeholders(&none, 290, {});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(none, (std::vector<int32_t>{1, 2}));
}

TEST(ImagePrompt, HashIsOfTheBytesAndNeverZero) {
  EXPECT_EQ(image_source_hash("abc"), image_source_hash("abc"));
  EXPECT_NE(image_source_hash("abc"), image_source_hash("abd"));
  EXPECT_EQ(image_source_hash(""), 14695981039346656037ull);
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
  EXPECT_EQ(image->hash, image_source_hash(*bytes));
  // Cut short, or not an image: errors naming it.
  auto cut = prepare_prompt_image(bytes->substr(0, bytes->size() / 2), "cut.png", *config);
  EXPECT_FALSE(cut.ok());
  auto junk = prepare_prompt_image("not an image", "junk", *config);
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find("junk"), std::string::npos);
}

}  // namespace
}  // namespace qs::vision
