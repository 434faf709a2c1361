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

TEST(Placeholders, AnExplicitExpansionReplacesThePlaceholderAndStartsTheSpanAtItsLead) {
  // A video heard with its sound: <|audio_bos|>, two video, one audio, one video, <|audio_eos|>.
  constexpr int32_t kVideo = 291, kBos = 293, kEos = 294;
  const std::vector<PlaceholderKind> kinds = {{kVideo, "video"}, {kAudio, "audio"}};
  PlaceholderItem v;
  v.token_id = kVideo;
  v.n_tokens = 3;
  v.item.video = true;
  v.tokens = {kBos, kVideo, kVideo, kAudio, kVideo, kEos};
  v.lead = 1;
  std::vector<int32_t> ids = {1, 288, kVideo, 289, 2, kAudio};
  auto items = expand_placeholders(&ids, kinds, {v, clip(2, 5)});
  ASSERT_TRUE(items.ok()) << items.status().to_string();
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 288, kBos, kVideo, kVideo, kAudio, kVideo, kEos, 289, 2,
                                       kAudio, kAudio}));
  ASSERT_EQ(items->size(), 2u);
  EXPECT_EQ((*items)[0].offset, 3);  // the first video placeholder, after <|audio_bos|>
  EXPECT_EQ((*items)[1].offset, 10);
  // A lead outside the tokens is refused.
  v.lead = 6;
  std::vector<int32_t> again = {kVideo};
  EXPECT_FALSE(expand_placeholders(&again, kinds, {v}).ok());
}

TEST(Placeholders, ItemsOfAnUnlistedKindOrWithoutTokensAreRefused) {
  std::vector<int32_t> ids = {kAudio};
  const std::vector<PlaceholderKind> images_only = {{kImage, "image"}};
  EXPECT_FALSE(expand_placeholders(&ids, images_only, {clip(1, 1)}).ok());
  EXPECT_FALSE(expand_placeholders(&ids, kKinds, {clip(0, 1)}).ok());
}

}  // namespace
}  // namespace qs::models
