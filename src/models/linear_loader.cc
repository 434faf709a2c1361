// models: LinearLoader (see linear_loader.h).
#include "models/linear_loader.h"

#include <algorithm>
#include <cstring>

#include "core/log.h"
#include "formats/layout_util.h"
#include "formats/layouts.h"
#include "ops/quant_matrix.h"

namespace qs::models {
namespace {

using formats::Layout;
using formats::QuantScheme;

// The tensors `module.<suffix>` of the checkpoint, bias excluded (it stays with the model).
// `all` is the checkpoint's sorted name list: the module's names are one contiguous run.
formats::StoredTensors module_tensors(const io::Checkpoint& ckpt,
                                      const std::vector<std::string>& all,
                                      const std::string& module, std::vector<std::string>* names) {
  formats::StoredTensors stored;
  const std::string prefix = module + ".";
  for (auto it = std::lower_bound(all.begin(), all.end(), prefix); it != all.end(); ++it) {
    const std::string& name = *it;
    if (name.compare(0, prefix.size(), prefix) != 0) break;
    const std::string suffix = name.substr(prefix.size());
    if (suffix == "bias" || suffix.find('.') != std::string::npos) continue;
    stored.emplace(suffix, ckpt.get(name).value());
    names->push_back(name);
  }
  return stored;
}

bool is_16bit(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

// The static activation scale (and zero point) of a W8A8 layer: `input_scale` (f32/f16/bf16,
// one element: per-tensor) and `input_zero_point` (int, one element; asymmetric only).
Status read_static_acts(const std::string& module, const QuantScheme& scheme,
                        const formats::StoredTensors& stored, float* scale, int32_t* zero) {
  if (!scheme.act.quantized() || scheme.act.dynamic) return ok_status();
  const std::string why = " (activations " + scheme.act.describe() + ")";
  auto it = stored.find("input_scale");
  if (it == stored.end()) return not_found(module + ".input_scale is missing" + why);
  const Tensor& s = it->second;
  if (!is_16bit(s.dtype) || s.numel() != 1) {
    return invalid_argument(module + ".input_scale is " + dtype_name(s.dtype) + " " +
                            shape_string(s.shape) + ", expected one f32/f16/bf16 value" + why);
  }
  *scale = formats::load_float(s, 0);
  it = stored.find("input_zero_point");
  if (it != stored.end()) {
    const Tensor& z = it->second;
    const bool int_type = z.dtype == DType::kI8 || z.dtype == DType::kI16 ||
                          z.dtype == DType::kI32 || z.dtype == DType::kI64;
    if (!int_type || z.numel() != 1) {
      return invalid_argument(module + ".input_zero_point is " + dtype_name(z.dtype) + " " +
                              shape_string(z.shape) + ", expected one integer" + why);
    }
    const int64_t v = formats::load_int(z, 0);
    if (v < -128 || v > 127) {
      return invalid_argument(module + ".input_zero_point " + std::to_string(v) +
                              " is outside int8" + why);
    }
    *zero = static_cast<int32_t>(v);
  }
  if (scheme.act.sym && *zero != 0) {
    return invalid_argument(module + ".input_zero_point is " + std::to_string(*zero) +
                            " for symmetric activations" + why);
  }
  return ok_status();
}

Result<formats::QuantizedWeight> quantized_shard(formats::QuantizedWeight w,
                                                 const LinearShard& shard) {
  if (shard.axis == LinearShard::Axis::kRows) {
    return formats::slice_rows(w, shard.begin, shard.count);
  }
  return formats::slice_cols(w, shard.begin, shard.count);
}

}  // namespace

Tensor dense_shard(const Tensor& w, const LinearShard& shard) {
  const size_t elem = dtype_size(w.dtype);
  const int64_t n = w.dim(0), k = w.dim(1);
  if (shard.axis == LinearShard::Axis::kRows) {
    Tensor v = w;
    v.shape = {shard.count, k};
    v.data = static_cast<const uint8_t*>(w.data) + shard.begin * k * static_cast<int64_t>(elem);
    v.writable_data = nullptr;
    return v;
  }
  Tensor out = Tensor::zeros(w.dtype, {n, shard.count});
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(static_cast<uint8_t*>(out.writable_data) + r * shard.count * elem,
                static_cast<const uint8_t*>(w.data) + (r * k + shard.begin) * elem,
                shard.count * elem);
  }
  return out;
}

Result<QuantScheme> LinearLoader::stored_scheme(const std::string& module, int64_t n,
                                                int64_t k) const {
  const QuantScheme configured = quant_.scheme_for(module);
  // Which layouts the stored tensor names can be; the config tells GPTQ from AWQ.
  auto pick = [&](std::initializer_list<Layout> layouts,
                  const std::string& what) -> Result<QuantScheme> {
    for (Layout l : layouts) {
      if (configured.layout == l) return configured;
    }
    for (Layout l : layouts) {
      // autoround.md §3.6: trust the tensors over the config (a layer the config leaves at
      // 16 bits may still have been exported quantized), read with the default scheme.
      if (quant_.default_scheme().layout == l) {
        QS_LOG_WARN(
            "%s: %s stores %s although the quantization config leaves it at 16 bits; "
            "reading it as %s",
            ckpt_.dir().c_str(), module.c_str(), what.c_str(),
            quant_.default_scheme().describe().c_str());
        return quant_.default_scheme();
      }
    }
    return invalid_argument(
        module + " stores " + what + ", which the checkpoint's quantization config (" +
        (quant_.quantized() ? quant_.summary() : std::string("none")) + ") cannot describe");
  };
  if (ckpt_.has(module + ".qweight")) return pick({Layout::kGptq, Layout::kAwq}, "a qweight");
  if (ckpt_.has(module + ".weight_packed")) {
    return pick({Layout::kCtPacked}, "a weight_packed (compressed-tensors pack-quantized)");
  }
  const std::string weight = module + ".weight";
  if (!ckpt_.has(weight)) {
    return invalid_argument(
        "tensor '" + weight + "' is missing (expected shape " + shape_string({n, k}) +
        (configured.quantized() ? ", or the tensors of " + configured.describe() : std::string()) +
        ")");
  }
  const DType dtype = ckpt_.get(weight).value().dtype;
  if (is_16bit(dtype)) {
    if (configured.quantized()) {
      QS_LOG_WARN(
          "%s: the quantization config makes %s %s, but it is stored as a %s weight; "
          "loading it unquantized",
          ckpt_.dir().c_str(), module.c_str(), configured.describe().c_str(), dtype_name(dtype));
    }
    return QuantScheme{};
  }
  if (dtype == DType::kF8E4M3) return pick({Layout::kFp8}, "an F8_E4M3 weight");
  if (dtype == DType::kI8) return pick({Layout::kCtInt}, "an I8 weight");
  return invalid_argument(ckpt_.file_of(weight) + ": " + weight + " has dtype " +
                          dtype_name(dtype) + ", which no supported layout stores");
}

Status LinearLoader::load_one(const std::string& module, int64_t n, int64_t k,
                              ops::LinearWeight* out, QuantScheme* scheme, size_t* stored_bytes,
                              const LinearShard& shard) {
  if (shard.split()) {
    const int64_t extent = shard.axis == LinearShard::Axis::kRows ? n : k;
    QS_CHECK(shard.begin >= 0 && shard.count > 0 && shard.begin + shard.count <= extent);
  }
  // The shard's share of the stored bytes, for reports.
  auto share = [&](size_t bytes) {
    if (!shard.split()) return bytes;
    const int64_t extent = shard.axis == LinearShard::Axis::kRows ? n : k;
    return static_cast<size_t>(static_cast<double>(bytes) * shard.count / extent);
  };
  QS_ASSIGN_OR_RETURN(*scheme, stored_scheme(module, n, k));
  std::vector<std::string> names;
  const formats::StoredTensors stored = module_tensors(ckpt_, names_, module, &names);
  {
    std::lock_guard<std::mutex> lock(consumed_mutex_);
    consumed_.insert(names.begin(), names.end());
  }
  *stored_bytes = 0;
  if (!scheme->quantized()) {
    const std::string weight = module + ".weight";
    QS_ASSIGN_OR_RETURN(Tensor w, ckpt_.get(weight, {n, k}));
    *stored_bytes = share(w.nbytes());
    if (shard.split()) w = dense_shard(w, shard);
    // The backend's form: on the CPU pair panels where its kernels want them, so that 16-bit
    // linears of every m read the packed form and the mapping's pages are given back.
    QS_ASSIGN_OR_RETURN(*out, backend_.make_dense_linear(std::move(w)));
    return ok_status();
  }
  for (const auto& [suffix, t] : stored) *stored_bytes += t.nbytes();
  *stored_bytes = share(*stored_bytes);
  QS_ASSIGN_OR_RETURN(formats::QuantizedWeight unpacked,
                      formats::unpack(module, *scheme, stored, n, k));
  if (shard.split()) {
    auto sliced = quantized_shard(std::move(unpacked), shard);
    if (!sliced.ok()) return sliced.status().with_context(module + " (tensor parallel)");
    unpacked = std::move(sliced).value();
  }
  float input_scale = 1.0f;
  int32_t input_zero = 0;
  QS_RETURN_IF_ERROR(read_static_acts(module, *scheme, stored, &input_scale, &input_zero));
  auto made = backend_.make_quant_linear(*scheme, unpacked, input_scale, input_zero);
  if (!made.ok()) return made.status().with_context(module);
  *out = std::move(made).value();
  return ok_status();
}

void LinearLoader::load(const std::string& module, int64_t n, int64_t k, ops::LinearWeight* out,
                        QuantScheme* scheme, size_t* stored_bytes, const LinearShard& shard) {
  Status s = load_one(module, n, k, out, scheme, stored_bytes, shard);
  if (!s.ok()) {
    problems_.push_back(s.message());
    *out = ops::LinearWeight();
  }
}

void LinearLoader::load_all(const std::vector<Request>& requests, ThreadPool& pool) {
  std::vector<Status> status(requests.size());
  pool.parallel_for(
      static_cast<int64_t>(requests.size()),
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const Request& r = requests[i];
          status[i] = load_one(r.module, r.n, r.k, r.out, r.scheme, r.stored_bytes, r.shard);
        }
      },
      1);
  for (size_t i = 0; i < requests.size(); ++i) {
    if (status[i].ok()) continue;
    problems_.push_back(status[i].message());
    *requests[i].out = ops::LinearWeight();
  }
}

}  // namespace qs::models
