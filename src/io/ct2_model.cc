// io: CTranslate2 model.bin reader (see ct2_model.h). The layout, all little-endian:
//   u32 binary version | string spec name | u32 spec revision | u32 n_variables
//   n_variables x { string name | u8 rank | rank x u32 dim | u8 dtype | u32 n_bytes | bytes }
//   u32 n_aliases | n_aliases x { string alias | string target }
// where a string is a u16 length that counts a terminating NUL, then that many bytes.
#include "io/ct2_model.h"

#include <cmath>
#include <cstring>

#include "core/limits.h"
#include "core/tensor.h"

namespace qs::io {

namespace {

// Version 4 replaced the item size by a dtype id; 6 is what CTranslate2 writes since 3.0.
constexpr uint32_t kCt2MinVersion = 4;
constexpr uint32_t kCt2MaxVersion = 6;

// The DataType enum of include/ctranslate2/types.h, in its order.
constexpr DType kCt2DTypes[] = {DType::kF32, DType::kI8,  DType::kI16,
                                DType::kI32, DType::kF16, DType::kBF16};

class Ct2Cursor {
 public:
  Ct2Cursor(const MappedFile& file) : file_(file) {}

  size_t offset() const { return pos_; }
  size_t left() const { return file_.size() - pos_; }

  Status need(uint64_t n, const std::string& what) const {
    if (n <= left()) return ok_status();
    return data_loss(file_.path() + ": truncated at byte " + std::to_string(pos_) + ": " + what +
                     " needs " + std::to_string(n) + " bytes, " + std::to_string(left()) + " left");
  }

  template <typename T>
  Result<T> read(const std::string& what) {
    QS_RETURN_IF_ERROR(need(sizeof(T), what));
    T v;
    std::memcpy(&v, file_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  Result<std::string> string(const std::string& what) {
    QS_ASSIGN_OR_RETURN(uint16_t n, read<uint16_t>(what + " length"));
    if (n == 0) {
      return data_loss(file_.path() + ": " + what + " at byte " + std::to_string(pos_ - 2) +
                       " has length 0 (the NUL terminator is counted)");
    }
    QS_RETURN_IF_ERROR(need(n, what));
    const char* p = reinterpret_cast<const char*>(file_.data() + pos_);
    if (p[n - 1] != '\0' || std::memchr(p, '\0', n - 1) != nullptr) {
      return data_loss(file_.path() + ": " + what + " at byte " + std::to_string(pos_) +
                       " is not one NUL-terminated string of " + std::to_string(n - 1) + " bytes");
    }
    pos_ += n;
    return std::string(p, n - 1);
  }

  const uint8_t* take(uint64_t n) {
    const uint8_t* p = file_.data() + pos_;
    pos_ += n;
    return p;
  }

 private:
  const MappedFile& file_;
  size_t pos_ = 0;
};

Result<Ct2Variable> read_variable(Ct2Cursor& in, const std::string& path, uint32_t i) {
  Ct2Variable v;
  const std::string where = "variable " + std::to_string(i);
  QS_ASSIGN_OR_RETURN(v.name, in.string(where + " name"));
  const std::string what = path + ": variable '" + v.name + "'";
  QS_ASSIGN_OR_RETURN(uint8_t rank, in.read<uint8_t>(what + " rank"));
  if (rank > limits::kMaxRank) {
    return data_loss(what + " has rank " + std::to_string(rank) + ", above the limit of " +
                     std::to_string(limits::kMaxRank));
  }
  for (uint8_t d = 0; d < rank; ++d) {
    QS_ASSIGN_OR_RETURN(uint32_t dim, in.read<uint32_t>(what + " dimension"));
    v.shape.push_back(dim);
  }
  QS_ASSIGN_OR_RETURN(int64_t numel, limits::checked_numel(v.shape, what));
  QS_ASSIGN_OR_RETURN(uint8_t type_id, in.read<uint8_t>(what + " dtype"));
  if (type_id >= std::size(kCt2DTypes)) {
    return data_loss(what + " has dtype id " + std::to_string(type_id) +
                     " (0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16)");
  }
  v.dtype = kCt2DTypes[type_id];
  QS_ASSIGN_OR_RETURN(uint32_t nbytes, in.read<uint32_t>(what + " byte count"));
  const uint64_t expected = static_cast<uint64_t>(numel) * dtype_size(v.dtype);
  if (nbytes != expected) {
    return data_loss(what + " " + shape_string(v.shape) + " " + dtype_name(v.dtype) + " holds " +
                     std::to_string(nbytes) + " bytes, expected " + std::to_string(expected));
  }
  QS_RETURN_IF_ERROR(in.need(nbytes, what + " data"));
  v.nbytes = nbytes;
  v.data = in.take(nbytes);
  return v;
}

}  // namespace

int64_t Ct2Variable::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<Ct2Model> Ct2Model::open(const std::string& path) {
  Ct2Model m;
  QS_ASSIGN_OR_RETURN(m.file_, MappedFile::open(path));
  Ct2Cursor in(*m.file_);
  QS_ASSIGN_OR_RETURN(m.binary_version_, in.read<uint32_t>("binary version"));
  if (m.binary_version_ < kCt2MinVersion || m.binary_version_ > kCt2MaxVersion) {
    return data_loss(path + ": binary version " + std::to_string(m.binary_version_) +
                     " is not a CTranslate2 model.bin version quantserve reads (" +
                     std::to_string(kCt2MinVersion) + " to " + std::to_string(kCt2MaxVersion) +
                     ")");
  }
  QS_ASSIGN_OR_RETURN(m.spec_, in.string("spec name"));
  QS_ASSIGN_OR_RETURN(m.revision_, in.read<uint32_t>("spec revision"));
  QS_ASSIGN_OR_RETURN(uint32_t n_variables, in.read<uint32_t>("variable count"));
  for (uint32_t i = 0; i < n_variables; ++i) {
    QS_ASSIGN_OR_RETURN(Ct2Variable v, read_variable(in, path, i));
    if (!m.index_.emplace(v.name, m.variables_.size()).second) {
      return data_loss(path + ": variable '" + v.name + "' is stored twice");
    }
    m.variables_.push_back(std::move(v));
  }
  QS_ASSIGN_OR_RETURN(uint32_t n_aliases, in.read<uint32_t>("alias count"));
  for (uint32_t i = 0; i < n_aliases; ++i) {
    QS_ASSIGN_OR_RETURN(std::string alias, in.string("alias " + std::to_string(i)));
    QS_ASSIGN_OR_RETURN(std::string target, in.string("target of alias '" + alias + "'"));
    // The converter aliases a variable to the first equal one it stored, never to an alias.
    if (!m.index_.count(target)) {
      return data_loss(path + ": alias '" + alias + "' names '" + target +
                       "', which is not a stored variable");
    }
    if (m.index_.count(alias) || !m.aliases_.emplace(alias, target).second) {
      return data_loss(path + ": alias '" + alias + "' is defined twice");
    }
  }
  if (in.left() != 0) {
    return data_loss(path + ": " + std::to_string(in.left()) + " bytes after the aliases at byte " +
                     std::to_string(in.offset()));
  }
  return m;
}

const Ct2Variable* Ct2Model::find(const std::string& name) const {
  auto alias = aliases_.find(name);
  auto it = index_.find(alias == aliases_.end() ? name : alias->second);
  return it == index_.end() ? nullptr : &variables_[it->second];
}

namespace {

// Element i of `v` as f32; integers as their value. The bytes follow a variable-length
// header, so they are read through memcpy, never through a typed pointer.
float ct2_element(const Ct2Variable& v, int64_t i) {
  const uint8_t* p = v.data + i * static_cast<int64_t>(dtype_size(v.dtype));
  switch (v.dtype) {
    case DType::kI8:
      return static_cast<float>(static_cast<int8_t>(*p));
    case DType::kI16: {
      int16_t x;
      std::memcpy(&x, p, 2);
      return x;
    }
    case DType::kI32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      return static_cast<float>(x);
    }
    case DType::kF16:
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return v.dtype == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    default: {
      float x;
      std::memcpy(&x, p, 4);
      return x;
    }
  }
}

}  // namespace

Result<std::vector<float>> Ct2Model::float_values(const std::string& name) const {
  const Ct2Variable* v = find(name);
  if (v == nullptr) return data_loss(path() + ": no variable '" + name + "'");
  if (find(v->name + "_zero") != nullptr || find(name + "_zero") != nullptr) {
    return unimplemented(path() + ": '" + name +
                         "' has a zero point (AWQ layout), which the importer does not read");
  }
  std::vector<float> out(v->numel());
  for (int64_t i = 0; i < v->numel(); ++i) out[i] = ct2_element(*v, i);
  if (dtype_is_float(v->dtype)) return out;
  const Ct2Variable* scale = find(v->name + "_scale");
  const std::string what = path() + ": '" + name + "' (" + dtype_name(v->dtype) + ")";
  if (v->dtype == DType::kI32 || scale == nullptr) {
    return data_loss(what + " is not a float tensor, nor a quantized one with a '" + v->name +
                     "_scale'");
  }
  if (scale->dtype != DType::kF32) {
    return data_loss(what + ": its scale is " + dtype_name(scale->dtype) + ", expected F32");
  }
  const bool per_row = v->dtype == DType::kI8;
  const int64_t rows = v->shape.empty() ? 1 : v->shape[0];
  const std::vector<int64_t> expected =
      per_row ? std::vector<int64_t>{rows} : std::vector<int64_t>{};
  if (v->shape.empty() || scale->shape != expected) {
    return data_loss(what + " " + shape_string(v->shape) + " has a scale of shape " +
                     shape_string(scale->shape) + ", expected " + shape_string(expected));
  }
  const int64_t cols = rows == 0 ? 0 : v->numel() / rows;
  for (int64_t r = 0; r < rows; ++r) {
    const float s = ct2_element(*scale, per_row ? r : 0);
    // The converter's scales are 127 / max|row| (or 127 for an all-zero row): never 0.
    if (!std::isfinite(s) || s == 0.0f) {
      return data_loss(what + ": scale of row " + std::to_string(r) + " is " + std::to_string(s));
    }
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] /= s;
  }
  return out;
}

Result<int64_t> Ct2Model::scalar(const std::string& name) const {
  const Ct2Variable* v = find(name);
  if (v == nullptr) return data_loss(path() + ": no variable '" + name + "'");
  if (!v->shape.empty()) {
    return data_loss(path() + ": '" + name + "' has shape " + shape_string(v->shape) +
                     ", expected a scalar");
  }
  const float x = ct2_element(*v, 0);
  // The flags and counts CTranslate2 stores are small integers; anything else is corrupt.
  if (!(x >= -(1 << 24) && x <= (1 << 24)) || x != static_cast<float>(static_cast<int64_t>(x))) {
    return data_loss(path() + ": scalar '" + name + "' is " + std::to_string(x) +
                     ", expected an integer");
  }
  return static_cast<int64_t>(x);
}

}  // namespace qs::io
