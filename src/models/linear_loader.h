// models: builds a model's matmul weights from a checkpoint. For each linear module it decides
// from the tensors actually stored (qweight, weight_packed, an fp8 or int8 weight, or a 16-bit
// weight) together with the detected quantization config which layout to read, checks the
// tensors against that layout (formats/layouts.h), unpacks and makes them resident
// (ops::QuantMatrix). 16-bit weights stay zero-copy views of the mapping. Problems are
// collected so that a broken checkpoint is reported in one go, each naming its layer.
#pragma once

#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "formats/quant_scheme.h"
#include "io/checkpoint.h"
#include "io/quant_config.h"
#include "ops/backend.h"
#include "ops/linear.h"

namespace qs::models {

// A tensor-parallel rank's part of a linear (Megatron-style): the output rows of a
// column-parallel linear or the input columns of a row-parallel one, [begin, begin + count).
// Quantized weights are sliced after unpacking, so one definition serves every layout, and a
// slice that would cut a quantization group is refused with the reason.
struct LinearShard {
  enum class Axis { kNone, kRows, kCols };
  Axis axis = Axis::kNone;
  int64_t begin = 0, count = 0;
  bool split() const { return axis != Axis::kNone; }
};

// The shard of a 16-bit W[n, k]: rows are a view of the same bytes (a mapping's pages outside
// it are never touched), columns an owned copy.
Tensor dense_shard(const Tensor& w, const LinearShard& shard);

class LinearLoader {
 public:
  // Weights are made in the form `backend`'s kernels read (ops/backend.h).
  LinearLoader(const io::Checkpoint& ckpt, const io::QuantConfig& quant,
               ops::Backend& backend = ops::cpu_backend())
      : ckpt_(ckpt), quant_(quant), names_(ckpt.names()), backend_(backend) {}

  // Loads module `module` ("model.layers.0.self_attn.q_proj", "lm_head"), stored as W[n, k],
  // into `out` (its `shard` only, when one is given), with the scheme it is stored in and its
  // stored bytes (the shard's share). On failure records the problem (see problems()) and
  // leaves `out` empty.
  void load(const std::string& module, int64_t n, int64_t k, ops::LinearWeight* out,
            formats::QuantScheme* scheme, size_t* stored_bytes, const LinearShard& shard = {});

  // As load(), returning the problem instead of recording it.
  Status load_checked(const std::string& module, int64_t n, int64_t k, ops::LinearWeight* out,
                      formats::QuantScheme* scheme, size_t* stored_bytes) {
    return load_one(module, n, k, out, scheme, stored_bytes, {});
  }

  // Many linears at once, split over the pool's threads (unpacking and repacking thousands of
  // MoE experts one after another made loading slow); each request as load() would do it,
  // with problems recorded in request order.
  struct Request {
    std::string module;
    int64_t n = 0, k = 0;
    ops::LinearWeight* out = nullptr;
    formats::QuantScheme* scheme = nullptr;
    size_t* stored_bytes = nullptr;
    LinearShard shard = {};
  };
  void load_all(const std::vector<Request>& requests, ThreadPool& pool);

  const std::vector<std::string>& problems() const { return problems_; }
  // Checkpoint tensors consumed so far (for the unexpected-tensor warning).
  const std::set<std::string>& consumed() const { return consumed_; }

 private:
  // The scheme the stored tensors of `module` are in, or an error naming what is there.
  Result<formats::QuantScheme> stored_scheme(const std::string& module, int64_t n, int64_t k) const;
  Status load_one(const std::string& module, int64_t n, int64_t k, ops::LinearWeight* out,
                  formats::QuantScheme* scheme, size_t* stored_bytes, const LinearShard& shard);

  const io::Checkpoint& ckpt_;
  const io::QuantConfig& quant_;
  const std::vector<std::string> names_;  // the checkpoint's, sorted; read once
  ops::Backend& backend_;
  std::vector<std::string> problems_;
  std::set<std::string> consumed_;
  std::mutex consumed_mutex_;  // load_all's workers add to consumed_
};

}  // namespace qs::models
