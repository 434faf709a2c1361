// tests: multimodal placeholder expansion (models/placeholders.h): images and clips widened in
// one pass keep prompt order and offsets, every kind's count is checked (none included), and
// items of a kind the model lacks are refused.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "models/placeholders.h"

namespace qs::models {
namespace {

constexpr int32_t kImage = 290, kAudio = 292;
const std::vector<PlaceholderKind> kKinds = {{kImage, "image"}, {kAudio, "audio"}};

PlaceholderItem image(int64_t tokens, uint64_t hash) {
  PlaceholderItem p;
  p.token_id = kImage;
  p.n_tokens = tokens;
  p.item.grid = {1, 2, 2 * tokens};
  p.item.hash = hash;
  return p;
}

PlaceholderItem clip(int64_t tokens, uint64_t hash) {
  PlaceholderItem p;
  p.token_id = kAudio;
  p.n_tokens = tokens;
  p.item.audio = true;
  p.item.frames = 4 * tokens;
  p.item.hash = hash;
  return p;
}

TEST(Placeholders, KindsWidenInOnePassInPromptOrder) {
  // audio, image, audio in the prompt; items listed images first, as the server builds them.
  std::vector<int32_t> ids = {1, kAudio, 7, kImage, 8, kAudio, 9};
  auto items = expand_placeholders(&ids, kKinds, {image(2, 10), clip(3, 20), clip(1, 30)});
  ASSERT_TRUE(items.ok()) << items.status().to_string();
  EXPECT_EQ(ids,
            (std::vector<int32_t>{1, kAudio, kAudio, kAudio, 7, kImage, kImage, 8, kAudio, 9}));
  ASSERT_EQ(items->size(), 3u);
  EXPECT_TRUE((*items)[0].audio);
  EXPECT_EQ((*items)[0].offset, 1);
  EXPECT_EQ((*items)[0].hash, 20u);
  EXPECT_FALSE((*items)[1].audio);
  EXPECT_EQ((*items)[1].offset, 5);
  EXPECT_EQ((*items)[2].offset, 8);
  EXPECT_EQ((*items)[2].hash, 30u);
}

TEST(Placeholders, EveryKindsCountMustMatchItsItems) {
  std::vector<int32_t> ids = {kImage, kImage, kAudio};
  auto too_few = expand_placeholders(&ids, kKinds, {image(1, 1), clip(1, 2)});
  ASSERT_FALSE(too_few.ok());
  EXPECT_NE(too_few.status().message().find("2 image placeholder(s) for 1 image(s)"),
            std::string::npos)
      << too_few.status().message();
  // A placeholder the user typed with no item behind it, and an item whose placeholder the
  // template dropped.
  std::vector<int32_t> typed = {1, kAudio};
  EXPECT_FALSE(expand_placeholders(&typed, kKinds, {}).ok());
  std::vector<int32_t> dropped = {1, 2};
  EXPECT_FALSE(expand_placeholders(&dropped, kKinds, {clip(2, 1)}).ok());
  EXPECT_EQ(dropped, (std::vector<int32_t>{1, 2}));  // left as it was
  // No media, no placeholders: nothing changes.
  auto none = expand_placeholders(&dropped, kKinds, {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(Placeholders, ItemsOfAnUnlistedKindOrWithoutTokensAreRefused) {
  std::vector<int32_t> ids = {kAudio};
  const std::vector<PlaceholderKind> images_only = {{kImage, "image"}};
  EXPECT_FALSE(expand_placeholders(&ids, images_only, {clip(1, 1)}).ok());
  EXPECT_FALSE(expand_placeholders(&ids, kKinds, {clip(0, 1)}).ok());
}

}  // namespace
}  // namespace qs::models
