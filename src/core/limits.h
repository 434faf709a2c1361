// core: the largest numbers quantserve accepts from a file or a request, in one place, so a
// user can read what will be refused and why. Each bound sits far above any released model
// (noted beside it) and far below what would overflow 64-bit shape arithmetic or make an
// allocation throw; a value past a bound is an error naming the field and the limit, never a
// crash. Shape products are computed only through checked_numel().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace qs::limits {

// config.json. The largest released decoders: 126 layers (Llama 3.1 405B), 256k vocabulary
// (Gemma), hidden 16384 and intermediate 53248 (Llama 405B), 128 heads, head_dim 256.
inline constexpr int64_t kMaxLayers = 1024;
inline constexpr int64_t kMaxVocab = int64_t{1} << 22;      // 4M entries
inline constexpr int64_t kMaxHiddenDim = int64_t{1} << 20;  // hidden and intermediate sizes
inline constexpr int64_t kMaxHeads = int64_t{1} << 12;
inline constexpr int64_t kMaxHeadDim = int64_t{1} << 12;
inline constexpr int64_t kMaxExperts = int64_t{1} << 12;  // routed experts of one MoE layer
// Positions only bound the KV cache the engine sizes per request (and refuses past half of
// memory), so this limit is generous: it keeps position arithmetic in int32.
inline constexpr int64_t kMaxContext = int64_t{1} << 30;
// Token ids are stored as int32 everywhere after loading.
inline constexpr int64_t kMaxTokenId = INT32_MAX;

// safetensors: upstream refuses headers over 100 MB.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t{100} << 20;
// Any tensor: rank and element count (2^40 elements is 1 TiB of int8, past any one weight).
inline constexpr int64_t kMaxRank = 8;
inline constexpr int64_t kMaxNumel = int64_t{1} << 40;

// Chat templates: what one render may produce and how much work it may do. A template that
// loops without end or doubles a string each step stops with an error at these bounds.
inline constexpr int64_t kMaxTemplateOutputBytes = int64_t{16} << 20;
inline constexpr int64_t kMaxTemplateSteps = int64_t{10'000'000};
inline constexpr int kMaxTemplateRecursion = 64;  // nested macro calls
inline constexpr int kMaxTemplateNesting = 128;   // nested blocks and expressions when parsing
inline constexpr int64_t kMaxTemplateValueBytes = int64_t{16} << 20;  // one string or list

// "config field 'num_hidden_layers' is 5000, above the limit of 1024". `what` names the field
// as the user wrote it, with its file when the caller knows it.
Status check_at_most(int64_t value, int64_t limit, const std::string& what);

// The element count of `shape`, or an error naming `what` when a dimension is negative, the
// rank or the product is past the limits above (which also keeps bytes = numel * 8 in range).
Result<int64_t> checked_numel(const std::vector<int64_t>& shape, const std::string& what);

}  // namespace qs::limits
