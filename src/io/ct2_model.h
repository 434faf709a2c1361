// io: reader for CTranslate2's model.bin (binary versions 4 to 6, the layout that
// ctranslate2.specs.model_spec serializes and src/models/model.cc loads): the spec name and
// revision, the variables (name, shape, dtype, bytes) and the aliases that share a variable's
// bytes, by mmap. Every length, rank, dimension and byte count is checked against the file
// before it is used, so a truncated or hostile file is an error that names the field, never a
// crash or a huge allocation. What the variables mean is the importer's business.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mmap_file.h"
#include "core/status.h"

namespace qs::io {

struct Ct2Variable {
  std::string name;
  DType dtype = DType::kF32;      // one of F32, I8, I16, I32, F16, BF16
  std::vector<int64_t> shape;     // rank 0 for the scalar flags (num_heads, pre_norm, ...)
  const uint8_t* data = nullptr;  // into the mapping; not aligned to the element size
  uint64_t nbytes = 0;

  int64_t numel() const;
};

class Ct2Model {
 public:
  static Result<Ct2Model> open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  uint32_t binary_version() const { return binary_version_; }
  const std::string& spec() const { return spec_; }  // "WhisperSpec", "TransformerSpec", ...
  uint32_t revision() const { return revision_; }
  const std::vector<Ct2Variable>& variables() const { return variables_; }  // file order
  const std::map<std::string, std::string>& aliases() const { return aliases_; }

  // The variable `name` names, directly or through an alias; null when neither exists.
  const Ct2Variable* find(const std::string& name) const;

  // The values of a floating-point variable, or of a quantized one dequantized the way
  // CTranslate2 quantized it: int8 `w` with `w_scale` [rows] holds round(x * scale[row]) of
  // each row of w seen as [rows, numel / rows] (conv weights included); int16 holds
  // round(x * scale) with one scalar scale. An alias of a quantized weight uses its target's
  // scale, as model.cc registers it. Errors name the variable: missing, an integer variable
  // without a scale, a scale of the wrong shape or dtype, or a zero point (AWQ's layouts).
  Result<std::vector<float>> float_values(const std::string& name) const;

  // A rank-0 integer or float variable as an integer (num_heads, the boolean flags).
  Result<int64_t> scalar(const std::string& name) const;

 private:
  std::shared_ptr<MappedFile> file_;
  uint32_t binary_version_ = 0;
  std::string spec_;
  uint32_t revision_ = 0;
  std::vector<Ct2Variable> variables_;
  std::map<std::string, size_t> index_;         // name -> position in variables_
  std::map<std::string, std::string> aliases_;  // alias -> a name in variables_
};

}  // namespace qs::io
