// models: the expansion of a prompt's multimodal placeholders. A chat template writes one
// placeholder token per item (<|image_pad|> / <|IMAGE|>, <|video_pad|>, <|AUDIO|>); the
// processor widens each into as many copies as the item has embeddings. This does that for
// every modality in one pass, so items of different kinds keep their order and offsets.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "models/multimodal.h"

namespace qs::models {

// A placeholder token the model reads, and what it stands for in errors ("image", ...).
struct PlaceholderKind {
  int32_t token_id = -1;
  const char* what = "item";
};

// One item waiting for its placeholder.
struct PlaceholderItem {
  int32_t token_id = -1;  // the single token the template wrote for it
  int64_t n_tokens = 0;   // its copies after expansion
  MultimodalItem item;    // everything but `offset`, which the expansion sets
  // When not empty, what the placeholder becomes instead of n_tokens copies of itself (a
  // Qwen2.5-Omni video with its sound: <|audio_bos|>, the two streams' placeholders
  // interleaved, <|audio_eos|>); the item's span starts `lead` tokens into it.
  std::vector<int32_t> tokens;
  int64_t lead = 0;
};

// Replaces the i-th occurrence of each kind's token in *ids by the n_tokens copies of the i-th
// item with that token (items of one kind in prompt order) and returns the items at their runs,
// in prompt order. Every kind's occurrences must match its items one for one, none included (a
// prompt that spells <|image_pad|> itself, or a template that dropped a part, is an error saying
// how many of each there were); an item of no listed kind is an error.
Result<std::vector<MultimodalItem>> expand_placeholders(std::vector<int32_t>* ids,
                                                        std::span<const PlaceholderKind> kinds,
                                                        std::vector<PlaceholderItem> items);

}  // namespace qs::models
