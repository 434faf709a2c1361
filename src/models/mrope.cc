// models: M-RoPE and TMRoPE positions of a multimodal prompt (see mrope.h).
#include "models/mrope.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

namespace qs::models {

namespace {

// Positions stay below this, so that a start plus a tick, or a tick plus a row, fits int32.
constexpr int64_t kMaxPosition = int64_t{1} << 30;

using Kind = MropeItem::Kind;

const char* kind_name(Kind k) {
  return k == Kind::kImage ? "an image" : k == Kind::kVideo ? "a video" : "an audio clip";
}

int32_t placeholder_of(const ModelConfig& c, Kind k) {
  return k == Kind::kImage   ? c.image_token_id
         : k == Kind::kVideo ? c.video_token_id
                             : c.audio_token_id;
}

bool is_omni(const ModelConfig& c) {
  return c.family == Family::kQwen2_5_OmniThinker;
}

Status check_grid(const ModelConfig& c, const MropeItem& item) {
  const VisionGrid& g = item.grid;
  const int64_t m = c.vision_merge_size;
  if (m < 1) return invalid_argument("the model has no vision positions (no merge size)");
  // Bounded so that t * (h / m) * (w / m), and the pixel count, cannot overflow.
  if (g.t < 1 || g.h < m || g.w < m || g.h % m != 0 || g.w % m != 0 || g.h > kMaxPosition ||
      g.w > kMaxPosition || (g.h / m) * (g.w / m) > kMaxPosition / g.t) {
    return invalid_argument(std::string(kind_name(item.kind)) + " grid of " + std::to_string(g.t) +
                            " x " + std::to_string(g.h) + " x " + std::to_string(g.w) +
                            " patches that the merge size " + std::to_string(m) +
                            " does not divide");
  }
  if (item.kind == Kind::kVideo && !(g.seconds_per_t >= 0 && g.seconds_per_t <= 3600)) {
    return invalid_argument("a video whose temporal patches span " +
                            std::to_string(g.seconds_per_t) + " s (0 to 3600 s)");
  }
  return ok_status();
}

// The temporal tick of each of the item's temporal patches, from 0. transformers multiplies
// float32 tensors and truncates (.long()), so the products are rounded to float32 in its order:
// Qwen2.5-VL t * (tokens_per_second * seconds), Omni (t * seconds) * position_id_per_seconds.
// A still image is 1 apart (VL) or position_id_per_seconds apart (Omni), exactly.
Result<std::vector<int64_t>> temporal_ticks(const ModelConfig& c, const MropeItem& item) {
  const VisionGrid& g = item.grid;
  std::vector<int64_t> ticks(static_cast<size_t>(g.t));
  const float seconds = static_cast<float>(g.seconds_per_t);
  const float per_second = static_cast<float>(c.position_id_per_seconds);
  const float interval = static_cast<float>(c.vision_tokens_per_second) * seconds;
  for (int64_t t = 0; t < g.t; ++t) {
    const float ft = static_cast<float>(t);
    float v = ft;
    if (is_omni(c)) {
      const float scaled = item.kind == Kind::kVideo ? ft * seconds : ft;
      v = scaled * per_second;
    } else if (item.kind == Kind::kVideo) {
      v = ft * interval;
    }
    if (!(v >= 0.0f && v < static_cast<float>(kMaxPosition))) {
      return invalid_argument(std::string(kind_name(item.kind)) +
                              " whose temporal positions pass 2^30");
    }
    ticks[t] = static_cast<int64_t>(v);
  }
  return ticks;
}

// transformers' get_chunked_index: [begin, end) ranges of `ticks` (non-decreasing), a new one
// starting where a tick reaches the next multiple of `per_chunk`. Like it, a tick that jumps
// past several multiples closes one range only, and the following ticks close the rest.
std::vector<std::pair<int64_t, int64_t>> chunk_ranges(std::span<const int64_t> ticks,
                                                      int64_t per_chunk) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const int64_t n = static_cast<int64_t>(ticks.size());
  int64_t start = 0, current = 1;
  for (int64_t i = 0; i < n; ++i) {
    if (ticks[i] >= current * per_chunk) {
      out.emplace_back(start, i);
      start = i;
      ++current;
    }
  }
  out.emplace_back(start, n);
  return out;
}

// Each of the video's merged tokens' tick, in prompt order (frame by frame, rows, columns).
std::vector<int64_t> token_ticks(const std::vector<int64_t>& ticks, int64_t per_frame) {
  std::vector<int64_t> out;
  out.reserve(ticks.size() * per_frame);
  for (int64_t t : ticks) out.insert(out.end(), per_frame, t);
  return out;
}

}  // namespace

Result<std::vector<AvChunk>> audio_in_video_chunks(const ModelConfig& config,
                                                   const VisionGrid& grid, int64_t audio_tokens) {
  if (!is_omni(config) || config.position_id_per_seconds <= 0 || config.seconds_per_chunk <= 0) {
    return invalid_argument("a video with its sound track needs TMRoPE (Qwen2.5-Omni's thinker)");
  }
  // int(position_id_per_seconds * seconds_per_chunk), as both the processor and the model.
  const double per = config.position_id_per_seconds * config.seconds_per_chunk;
  if (!(per >= 1 && per < static_cast<double>(kMaxPosition))) {
    return invalid_argument("position_id_per_seconds x seconds_per_chunk must be 1 to 2^30");
  }
  const int64_t per_chunk = static_cast<int64_t>(per);
  MropeItem item;
  item.kind = Kind::kVideo;
  item.grid = grid;
  item.audio_tokens = audio_tokens;
  QS_RETURN_IF_ERROR(check_grid(config, item));
  if (audio_tokens < 1 || audio_tokens > kMaxPosition) {
    return invalid_argument("a video's sound track of " + std::to_string(audio_tokens) +
                            " placeholders");
  }
  const int64_t m = config.vision_merge_size;
  QS_ASSIGN_OR_RETURN(std::vector<int64_t> ticks, temporal_ticks(config, item));
  const std::vector<int64_t> video = token_ticks(ticks, (grid.h / m) * (grid.w / m));
  std::vector<int64_t> audio(static_cast<size_t>(audio_tokens));
  for (int64_t k = 0; k < audio_tokens; ++k) audio[k] = k;  // audio counts like text
  const auto v = chunk_ranges(video, per_chunk), a = chunk_ranges(audio, per_chunk);
  std::vector<AvChunk> out(std::max(v.size(), a.size()));
  for (size_t j = 0; j < out.size(); ++j) {
    if (j < v.size()) out[j].video = v[j].second - v[j].first;
    if (j < a.size()) out[j].audio = a[j].second - a[j].first;
  }
  return out;
}

Status check_placeholders(std::span<const int32_t> ids, const ModelConfig& config,
                          const MropeItem& item) {
  const int64_t n = static_cast<int64_t>(ids.size());
  const std::string what = kind_name(item.kind);
  const int32_t id = placeholder_of(config, item.kind);
  if (id < 0) return invalid_argument("the model names no placeholder for " + what);
  if (item.kind == Kind::kAudio) {
    if (item.audio_tokens < 1) return invalid_argument("an audio clip of no placeholders");
  } else {
    QS_RETURN_IF_ERROR(check_grid(config, item));
  }
  const int64_t span = item.span(config.vision_merge_size);
  const int64_t at = item.offset;
  if (at < 0 || span > n || at > n - span) {
    return invalid_argument(what + " of " + std::to_string(span) + " placeholders at " +
                            std::to_string(at) + ", past the prompt's " + std::to_string(n) +
                            " tokens");
  }
  if (!item.audio_in_video()) {
    for (int64_t j = at; j < at + span; ++j) {
      if (ids[j] != id) {
        return invalid_argument(what + " of " + std::to_string(span) + " placeholders at " +
                                std::to_string(at) + " over a prompt whose token " +
                                std::to_string(j) + " is not one");
      }
    }
    return ok_status();
  }
  if (config.audio_token_id < 0) return invalid_argument("the model takes no audio");
  QS_ASSIGN_OR_RETURN(std::vector<AvChunk> chunks,
                      audio_in_video_chunks(config, item.grid, item.audio_tokens));
  int64_t j = at;
  for (const AvChunk& ch : chunks) {
    for (int64_t k = 0; k < ch.video + ch.audio; ++k, ++j) {
      const bool video = k < ch.video;
      if (ids[j] != (video ? id : config.audio_token_id)) {
        return invalid_argument(
            "a video with its sound track whose placeholders are not interleaved in " +
            std::to_string(chunks.size()) + " chunks of seconds_per_chunk: token " +
            std::to_string(j) + " should be " + (video ? "video" : "audio"));
      }
    }
  }
  // get_rope_index gives the two tokens on each side one position; it counts on them there.
  const int32_t around[] = {config.vision_start_token_id, config.audio_start_token_id,
                            config.audio_end_token_id, config.vision_end_token_id};
  const char* names[] = {"<|vision_bos|>", "<|audio_bos|>", "<|audio_eos|>", "<|vision_eos|>"};
  const int64_t where[] = {at - 2, at - 1, at + span, at + span + 1};
  for (int k = 0; k < 4; ++k) {
    if (around[k] < 0 || where[k] < 0 || where[k] >= n || ids[where[k]] != around[k]) {
      return invalid_argument("a video with its sound track (" +
                              std::to_string(item.grid.tokens(config.vision_merge_size)) +
                              " video and " + std::to_string(item.audio_tokens) +
                              " audio placeholders from token " + std::to_string(at) +
                              ") without " + names[k] + " at token " + std::to_string(where[k]));
    }
  }
  return ok_status();
}

Result<MropePositions> mrope_positions(std::span<const int32_t> ids, const ModelConfig& config,
                                       std::span<const MropeItem> items) {
  const int64_t n = static_cast<int64_t>(ids.size()), m = config.vision_merge_size;
  if (config.mrope_section.empty()) {
    return invalid_argument("3-D positions asked of a model without M-RoPE");
  }
  const bool omni = is_omni(config);
  MropePositions out;
  out.positions.assign(static_cast<size_t>(3 * n), 0);
  int64_t largest = -1, next = 0, cursor = 0;  // next: the next text position
  bool overflow = false;
  auto put = [&](int64_t j, int64_t t, int64_t h, int64_t w) {
    overflow |= std::max({t, h, w}) >= kMaxPosition;
    out.positions[0 * n + j] = static_cast<int32_t>(std::min(t, kMaxPosition));
    out.positions[1 * n + j] = static_cast<int32_t>(std::min(h, kMaxPosition));
    out.positions[2 * n + j] = static_cast<int32_t>(std::min(w, kMaxPosition));
    largest = std::max({largest, t, h, w});
  };
  const int32_t placeholders[] = {config.image_token_id, config.video_token_id,
                                  config.audio_token_id};
  auto text_until = [&](int64_t end) -> Status {
    for (; cursor < end; ++cursor, ++next) {
      for (int32_t p : placeholders) {
        if (p >= 0 && ids[cursor] == p) {
          return invalid_argument("the prompt has a placeholder (token " + std::to_string(cursor) +
                                  ") outside its items");
        }
      }
      put(cursor, next, next, next);
    }
    return ok_status();
  };
  for (const MropeItem& it : items) {
    if (it.kind == Kind::kAudio && !omni) {
      return invalid_argument("the model has no positions for audio (Qwen2.5-VL)");
    }
    QS_RETURN_IF_ERROR(check_placeholders(ids, config, it));
    const int64_t lead = it.audio_in_video() ? 2 : 0, end = it.offset + it.span(m);
    if (it.offset - lead < cursor) {
      return invalid_argument("the prompt's items overlap or are out of order (at token " +
                              std::to_string(it.offset) + ")");
    }
    QS_RETURN_IF_ERROR(text_until(it.offset - lead));
    if (it.kind == Kind::kAudio) {  // TMRoPE: audio counts like text
      for (; cursor < end; ++cursor, ++next) put(cursor, next, next, next);
      continue;
    }
    QS_ASSIGN_OR_RETURN(std::vector<int64_t> ticks, temporal_ticks(config, it));
    const int64_t gh = it.grid.h / m, gw = it.grid.w / m;
    if (!it.audio_in_video()) {
      const int64_t st = next;
      int64_t block = st;
      for (int64_t t = 0; t < it.grid.t; ++t) {
        for (int64_t y = 0; y < gh; ++y) {
          for (int64_t x = 0; x < gw; ++x, ++cursor) {
            put(cursor, st + ticks[t], st + y, st + x);
            block = std::max({block, st + ticks[t], st + y, st + x});
          }
        }
      }
      next = omni ? block + 1 : st + std::max(gh, gw);
      continue;
    }
    // A video with its sound track: <|vision_bos|><|audio_bos|> share one position, both
    // streams start one past it, and the chunks come video first.
    put(cursor, next, next, next);
    put(cursor + 1, next, next, next);
    cursor += 2;
    const int64_t st = next + 1;
    QS_ASSIGN_OR_RETURN(std::vector<AvChunk> chunks,
                        audio_in_video_chunks(config, it.grid, it.audio_tokens));
    int64_t frame_token = 0, audio = 0, last = st;  // last: the largest of the last chunk
    for (const AvChunk& ch : chunks) {
      if (ch.video > 0) last = st;
      for (int64_t k = 0; k < ch.video; ++k, ++frame_token, ++cursor) {
        const int64_t t = frame_token / (gh * gw), y = frame_token / gw % gh, x = frame_token % gw;
        put(cursor, st + ticks[t], st + y, st + x);
        last = std::max({last, st + ticks[t], st + y, st + x});
      }
      for (int64_t k = 0; k < ch.audio; ++k, ++audio, ++cursor) {
        put(cursor, st + audio, st + audio, st + audio);
        last = st + audio;
      }
    }
    next = last + 1;  // <|audio_eos|><|vision_eos|> share it, the text goes on from there
    put(cursor, next, next, next);
    put(cursor + 1, next, next, next);
    cursor += 2;
    ++next;
  }
  QS_RETURN_IF_ERROR(text_until(n));
  if (overflow) return invalid_argument("the prompt's 3-D positions pass 2^30");
  out.delta = static_cast<int32_t>(largest + 1 - n);
  return out;
}

Result<MropePositions> mrope_positions(std::span<const int32_t> ids, const ModelConfig& config,
                                       std::span<const VisionGrid> images,
                                       std::span<const VisionGrid> videos) {
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<MropeItem> items;
  size_t next_image = 0, next_video = 0;
  auto kind_of = [&](int32_t id, Kind* k) {
    for (Kind c : {Kind::kImage, Kind::kVideo, Kind::kAudio}) {
      if (placeholder_of(config, c) >= 0 && id == placeholder_of(config, c)) {
        *k = c;
        return true;
      }
    }
    return false;
  };
  for (int64_t i = 0; i < n;) {
    Kind k = Kind::kImage, same = Kind::kImage;
    if (!kind_of(ids[i], &k)) {
      ++i;
      continue;
    }
    int64_t end = i + 1;
    while (end < n && kind_of(ids[end], &same) && same == k) ++end;
    MropeItem item;
    item.kind = k;
    item.offset = i;
    if (k == Kind::kAudio) {
      item.audio_tokens = end - i;
    } else {
      std::span<const VisionGrid> grids = k == Kind::kImage ? images : videos;
      size_t& next = k == Kind::kImage ? next_image : next_video;
      if (next >= grids.size()) {
        return invalid_argument(std::string("the prompt has more ") +
                                (k == Kind::kImage ? "image" : "video") + " runs than grids");
      }
      item.grid = grids[next++];
    }
    items.push_back(item);
    i = end;
  }
  if (next_image != images.size() || next_video != videos.size()) {
    return invalid_argument("the prompt has fewer image or video runs than grids");
  }
  return mrope_positions(ids, config, items);
}

}  // namespace qs::models
