// io: reader for GGUF files (llama.cpp's format, versions 2 and 3): the header, the typed
// key/value metadata (arrays included), the tensor infos and the aligned data section, by
// mmap. Every count, length, dimension and offset is checked against the file before it is
// used, and an error names the field and the numbers, so a truncated or hostile file is an
// error, never a crash or a huge allocation.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mmap_file.h"
#include "core/status.h"
#include "formats/ggml_quants.h"

namespace qs::io {

// gguf_type numbers (gguf.h).
enum class GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

const char* gguf_value_type_name(GgufValueType t);

// One metadata value: a scalar (one element) or an array of one element type. Integers and
// bools are kept as int64 (a u64 above INT64_MAX is refused at read), floats as double.
struct GgufValue {
  GgufValueType type = GgufValueType::kU8;  // kArray for arrays
  GgufValueType elem_type = GgufValueType::kU8;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;

  bool is_array() const { return type == GgufValueType::kArray; }
  GgufValueType scalar_type() const { return is_array() ? elem_type : type; }
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the row length (innermost)
  uint32_t type = 0;        // ggml_type; ggml_type_traits(type) is non-null
  uint64_t offset = 0;      // within the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the mapping

  int64_t numel() const;
  // The PyTorch/HF shape: ne reversed.
  std::vector<int64_t> hf_shape() const;
};

class GgufFile {
 public:
  static Result<GgufFile> open(const std::string& path);
  // Parses an in-memory image (tests; open() maps the file and calls this).
  static Result<GgufFile> parse(std::shared_ptr<MappedFile> file, const uint8_t* data, size_t size,
                                const std::string& source);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  bool has(const std::string& key) const { return kv_.count(key) > 0; }

  // Typed access; errors name the file, the key, and the expected and found types.
  Result<std::string> get_string(const std::string& key) const;
  Result<int64_t> get_int(const std::string& key) const;   // any integer type
  Result<double> get_float(const std::string& key) const;  // f32/f64, or an integer
  Result<bool> get_bool(const std::string& key) const;
  Result<std::vector<std::string>> get_string_array(const std::string& key) const;
  Result<std::vector<int64_t>> get_int_array(const std::string& key) const;
  Result<std::vector<double>> get_float_array(const std::string& key) const;

  // A tokenizer.ggml.*_token_id: -1 when the key is absent or holds llama.cpp's "none"
  // (u32 0xFFFFFFFF, or -1); otherwise it must be in [0, n_tokens).
  Result<int64_t> get_token_id(const std::string& key, int64_t n_tokens) const;

  // Dequantizes tensor `t` to f32 (row-major in hf_shape()).
  std::vector<float> dequantize(const GgufTensorInfo& t) const;

 private:
  Result<const GgufValue*> find(const std::string& key) const;

  std::shared_ptr<MappedFile> file_;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensorInfo> tensors_;
};

}  // namespace qs::io
