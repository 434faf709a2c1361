// io: GGUF v2/v3 parsing with every read bounds-checked (see gguf.h).
#include "io/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace qs::io {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS

// Reads little-endian values from [data, data + size); every read checks what is left, and
// failures name the field being read.
class GgufCursor {
 public:
  GgufCursor(const uint8_t* data, size_t size, std::string source)
      : data_(data), size_(size), source_(std::move(source)) {}

  size_t pos() const { return pos_; }
  size_t left() const { return size_ - pos_; }

  Status error(const std::string& field, const std::string& what) const {
    return data_loss(source_ + ": " + field + " at byte " + std::to_string(pos_) + ": " + what);
  }

  template <typename T>
  Status read(T* out, const std::string& field) {
    if (left() < sizeof(T)) {
      return error(field, "file ends (" + std::to_string(left()) + " bytes left, need " +
                              std::to_string(sizeof(T)) + ")");
    }
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return ok_status();
  }

  Status read_string(std::string* out, const std::string& field) {
    uint64_t n = 0;
    QS_RETURN_IF_ERROR(read(&n, field + " length"));
    if (n > left()) {
      return error(field, "string length " + std::to_string(n) + " exceeds the " +
                              std::to_string(left()) + " bytes left");
    }
    out->assign(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return ok_status();
  }

  // A count of items of at least `min_item_bytes` each must fit in what is left, which
  // bounds every allocation by the file size.
  Status check_count(uint64_t n, size_t min_item_bytes, const std::string& field) const {
    if (min_item_bytes > 0 && n > left() / min_item_bytes) {
      return error(field, "count " + std::to_string(n) + " cannot fit in the " +
                              std::to_string(left()) + " bytes left");
    }
    return ok_status();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  std::string source_;
};

size_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16:
      return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32:
      return 4;
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kF64:
    case GgufValueType::kString:  // its u64 length at least
      return 8;
    case GgufValueType::kArray:
      return 12;
  }
  return 0;
}

bool known_type(uint32_t t) {
  return t <= static_cast<uint32_t>(GgufValueType::kF64);
}

// Appends one scalar of type `t` to `v`.
Status read_scalar(GgufCursor& c, GgufValueType t, GgufValue* v, const std::string& field) {
  switch (t) {
#define QS_GGUF_INT(enum_name, ctype)           \
  case GgufValueType::enum_name: {              \
    ctype x;                                    \
    QS_RETURN_IF_ERROR(c.read(&x, field));      \
    v->ints.push_back(static_cast<int64_t>(x)); \
    return ok_status();                         \
  }
    QS_GGUF_INT(kU8, uint8_t)
    QS_GGUF_INT(kI8, int8_t)
    QS_GGUF_INT(kU16, uint16_t)
    QS_GGUF_INT(kI16, int16_t)
    QS_GGUF_INT(kU32, uint32_t)
    QS_GGUF_INT(kI32, int32_t)
    QS_GGUF_INT(kI64, int64_t)
#undef QS_GGUF_INT
    case GgufValueType::kU64: {
      uint64_t x;
      QS_RETURN_IF_ERROR(c.read(&x, field));
      if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return c.error(field, "u64 value " + std::to_string(x) + " is out of range");
      }
      v->ints.push_back(static_cast<int64_t>(x));
      return ok_status();
    }
    case GgufValueType::kBool: {
      uint8_t x;
      QS_RETURN_IF_ERROR(c.read(&x, field));
      if (x > 1) return c.error(field, "bool byte is " + std::to_string(x) + ", not 0 or 1");
      v->ints.push_back(x);
      return ok_status();
    }
    case GgufValueType::kF32: {
      float x;
      QS_RETURN_IF_ERROR(c.read(&x, field));
      v->floats.push_back(x);
      return ok_status();
    }
    case GgufValueType::kF64: {
      double x;
      QS_RETURN_IF_ERROR(c.read(&x, field));
      v->floats.push_back(x);
      return ok_status();
    }
    case GgufValueType::kString: {
      std::string s;
      QS_RETURN_IF_ERROR(c.read_string(&s, field));
      v->strings.push_back(std::move(s));
      return ok_status();
    }
    case GgufValueType::kArray:
      break;
  }
  return c.error(field, "nested arrays are not supported");
}

Status read_value(GgufCursor& c, GgufValue* v, const std::string& key) {
  uint32_t type = 0;
  QS_RETURN_IF_ERROR(c.read(&type, "type of '" + key + "'"));
  if (!known_type(type)) {
    return c.error("type of '" + key + "'", "unknown value type " + std::to_string(type));
  }
  v->type = static_cast<GgufValueType>(type);
  if (v->type != GgufValueType::kArray) return read_scalar(c, v->type, v, "value of '" + key + "'");
  uint32_t elem = 0;
  QS_RETURN_IF_ERROR(c.read(&elem, "element type of '" + key + "'"));
  if (!known_type(elem) || elem == static_cast<uint32_t>(GgufValueType::kArray)) {
    return c.error("element type of '" + key + "'",
                   "unsupported array element type " + std::to_string(elem));
  }
  v->elem_type = static_cast<GgufValueType>(elem);
  uint64_t n = 0;
  QS_RETURN_IF_ERROR(c.read(&n, "length of '" + key + "'"));
  QS_RETURN_IF_ERROR(c.check_count(n, scalar_size(v->elem_type), "length of '" + key + "'"));
  for (uint64_t i = 0; i < n; ++i) {
    QS_RETURN_IF_ERROR(read_scalar(c, v->elem_type, v, "'" + key + "'[" + std::to_string(i) + "]"));
  }
  return ok_status();
}

Status read_tensor_info(GgufCursor& c, size_t index, GgufTensorInfo* t) {
  const std::string field = "tensor info " + std::to_string(index);
  QS_RETURN_IF_ERROR(c.read_string(&t->name, field + " name"));
  const std::string named = field + " ('" + t->name + "')";
  uint32_t n_dims = 0;
  QS_RETURN_IF_ERROR(c.read(&n_dims, named + " n_dims"));
  if (n_dims == 0 || n_dims > kMaxDims) {
    return c.error(named + " n_dims", std::to_string(n_dims) + " is not in [1, 4]");
  }
  int64_t numel = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t ne = 0;
    QS_RETURN_IF_ERROR(c.read(&ne, named + " ne[" + std::to_string(d) + "]"));
    // Bounded so that the element count cannot overflow: no tensor has 2^62 elements.
    if (ne == 0 || ne > (uint64_t{1} << 62) / static_cast<uint64_t>(numel)) {
      return c.error(named + " ne[" + std::to_string(d) + "]",
                     "dimension " + std::to_string(ne) + " is zero or too large");
    }
    numel *= static_cast<int64_t>(ne);
    t->ne.push_back(static_cast<int64_t>(ne));
  }
  QS_RETURN_IF_ERROR(c.read(&t->type, named + " type"));
  const formats::GgmlTypeTraits* traits = formats::ggml_type_traits(t->type);
  if (traits == nullptr) {
    return c.error(named + " type", std::string("ggml type ") + std::to_string(t->type) + " (" +
                                        formats::ggml_type_name(t->type) +
                                        ") is not supported (F32, F16, BF16, Q4_0, Q4_1, Q8_0, "
                                        "Q4_K, Q6_K are)");
  }
  if (t->ne[0] % traits->block_size != 0) {
    return c.error(named + " ne[0]", "row length " + std::to_string(t->ne[0]) +
                                         " is not a multiple of the " + traits->name +
                                         " block size " + std::to_string(traits->block_size));
  }
  t->nbytes = static_cast<uint64_t>(numel / traits->block_size) * traits->block_bytes;
  return c.read(&t->offset, named + " offset");
}

}  // namespace

const char* gguf_value_type_name(GgufValueType t) {
  static const char* const kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                       "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "unknown";
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

std::vector<int64_t> GgufTensorInfo::hf_shape() const {
  return {ne.rbegin(), ne.rend()};
}

Result<GgufFile> GgufFile::open(const std::string& path) {
  QS_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(path));
  const uint8_t* data = file->data();
  const size_t size = file->size();
  return parse(std::move(file), data, size, path);
}

Result<GgufFile> GgufFile::parse(std::shared_ptr<MappedFile> file, const uint8_t* data, size_t size,
                                 const std::string& source) {
  GgufFile g;
  g.file_ = std::move(file);
  g.path_ = source;
  GgufCursor c(data, size, source);
  uint32_t magic = 0;
  QS_RETURN_IF_ERROR(c.read(&magic, "magic"));
  if (magic != kMagic) return c.error("magic", "not a GGUF file (no 'GGUF' magic)");
  QS_RETURN_IF_ERROR(c.read(&g.version_, "version"));
  if (g.version_ != 2 && g.version_ != 3) {
    return c.error("version", "GGUF version " + std::to_string(g.version_) +
                                  " is not supported (2 and 3 are)");
  }
  uint64_t n_tensors = 0, n_kv = 0;
  QS_RETURN_IF_ERROR(c.read(&n_tensors, "tensor_count"));
  QS_RETURN_IF_ERROR(c.read(&n_kv, "metadata_kv_count"));
  // A key/value needs at least a key length, a type and a 1-byte value; a tensor info at
  // least a name length, n_dims, one dim, a type and an offset.
  QS_RETURN_IF_ERROR(c.check_count(n_kv, 13, "metadata_kv_count"));
  QS_RETURN_IF_ERROR(c.check_count(n_tensors, 32, "tensor_count"));

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    QS_RETURN_IF_ERROR(c.read_string(&key, "metadata key " + std::to_string(i)));
    GgufValue v;
    QS_RETURN_IF_ERROR(read_value(c, &v, key));
    if (!g.kv_.emplace(key, std::move(v)).second) {
      return c.error("metadata key " + std::to_string(i), "duplicate key '" + key + "'");
    }
  }
  if (g.has("general.alignment")) {
    QS_ASSIGN_OR_RETURN(int64_t a, g.get_int("general.alignment"));
    if (a <= 0 || (a & (a - 1)) != 0 || a > (1 << 20)) {
      return data_loss(source + ": general.alignment " + std::to_string(a) +
                       " is not a power of two up to 1 MiB");
    }
    g.alignment_ = static_cast<uint64_t>(a);
  }

  std::map<std::string, size_t> seen;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    QS_RETURN_IF_ERROR(read_tensor_info(c, i, &t));
    if (!seen.emplace(t.name, i).second) {
      return data_loss(source + ": tensor '" + t.name + "' appears twice");
    }
    g.tensors_.push_back(std::move(t));
  }
  const uint64_t data_start = (c.pos() + g.alignment_ - 1) / g.alignment_ * g.alignment_;
  if (n_tensors > 0 && data_start > size) {
    return data_loss(source + ": data section would start at byte " + std::to_string(data_start) +
                     ", past the end of the " + std::to_string(size) + "-byte file");
  }
  const uint64_t data_size = size - std::min<uint64_t>(data_start, size);
  // Tensors must lie in the data section, aligned, and not overlap.
  std::vector<const GgufTensorInfo*> by_offset;
  for (GgufTensorInfo& t : g.tensors_) {
    const std::string what = source + ": tensor '" + t.name + "'";
    if (t.offset % g.alignment_ != 0) {
      return data_loss(what + " offset " + std::to_string(t.offset) +
                       " is not a multiple of the alignment " + std::to_string(g.alignment_));
    }
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      return data_loss(what + " bytes [" + std::to_string(t.offset) + ", +" +
                       std::to_string(t.nbytes) + ") run past the " + std::to_string(data_size) +
                       "-byte data section");
    }
    t.data = data + data_start + t.offset;
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo* prev = by_offset[i - 1];
    if (prev->offset + prev->nbytes > by_offset[i]->offset) {
      return data_loss(source + ": tensors '" + prev->name + "' and '" + by_offset[i]->name +
                       "' overlap");
    }
  }
  return g;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  for (const GgufTensorInfo& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Result<const GgufValue*> GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return not_found(path_ + ": metadata key '" + key + "' not found");
  return &it->second;
}

namespace {

bool is_int_type(GgufValueType t) {
  return t != GgufValueType::kF32 && t != GgufValueType::kF64 && t != GgufValueType::kString &&
         t != GgufValueType::kArray && t != GgufValueType::kBool;
}

Status type_error(const std::string& path, const std::string& key, const char* expected,
                  const GgufValue& v) {
  std::string found = gguf_value_type_name(v.type);
  if (v.is_array()) found += std::string(" of ") + gguf_value_type_name(v.elem_type);
  return data_loss(path + ": metadata '" + key + "' is " + found + ", expected " + expected);
}

}  // namespace

Result<std::string> GgufFile::get_string(const std::string& key) const {
  QS_ASSIGN_OR_RETURN(const GgufValue* v, find(key));
  if (v->type != GgufValueType::kString) return type_error(path_, key, "a string", *v);
  return v->strings[0];
}

Result<int64_t> GgufFile::get_int(const std::string& key) const {
  QS_ASSIGN_OR_RETURN(const GgufValue* v, find(key));
  if (v->is_array() || !is_int_type(v->type)) return type_error(path_, key, "an integer", *v);
  return v->ints[0];
}

Result<double> GgufFile::get_float(const std::string& key) const {
  QS_ASSIGN_OR_RETURN(const GgufValue* v, find(key));
  if (v->type == GgufValueType::kF32 || v->type == GgufValueType::kF64) return v->floats[0];
  if (!v->is_array() && is_int_type(v->type)) return static_cast<double>(v->ints[0]);
  return type_error(path_, key, "a number", *v);
}

Result<bool> GgufFile::get_bool(const std::string& key) const {
  QS_ASSIGN_OR_RETURN(const GgufValue* v, find(key));
  if (v->type != GgufValueType::kBool) return type_error(path_, key, "a bool", *v);
  return v->ints[0] != 0;
}

Result<std::vector<std::string>> GgufFile::get_string_array(const std::string& key) const {
  QS_ASSIGN_OR_RETURN(const GgufValue* v, find(key));
  if (!v->is_array() || v->elem_type != GgufValueType::kString) {
    return type_error(path_, key, "an array of string", *v);
  }
  return v->strings;
}

Result<std::vector<int64_t>> GgufFile::get_int_array(const std::string& key) const {
  QS_ASSIGN_OR_RETURN(const GgufValue* v, find(key));
  if (!v->is_array() || !is_int_type(v->elem_type)) {
    return type_error(path_, key, "an array of integers", *v);
  }
  return v->ints;
}

Result<std::vector<double>> GgufFile::get_float_array(const std::string& key) const {
  QS_ASSIGN_OR_RETURN(const GgufValue* v, find(key));
  if (!v->is_array() ||
      (v->elem_type != GgufValueType::kF32 && v->elem_type != GgufValueType::kF64)) {
    return type_error(path_, key, "an array of floats", *v);
  }
  return v->floats;
}

Result<int64_t> GgufFile::get_token_id(const std::string& key, int64_t n_tokens) const {
  if (!has(key)) return int64_t{-1};
  QS_ASSIGN_OR_RETURN(int64_t id, get_int(key));
  if (id == -1 || id == 0xFFFFFFFFll) return int64_t{-1};
  if (id < 0 || id >= n_tokens) {
    return data_loss(path_ + ": " + key + " " + std::to_string(id) + " is outside the " +
                     std::to_string(n_tokens) + "-token vocabulary");
  }
  return id;
}

std::vector<float> GgufFile::dequantize(const GgufTensorInfo& t) const {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  formats::dequantize_ggml(static_cast<formats::GgmlType>(t.type), t.data, t.numel(), out.data());
  return out;
}

}  // namespace qs::io
