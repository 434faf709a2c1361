// io: the safetensors format (huggingface/safetensors): a little-endian u64 header length N,
// N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {..}},
// then the byte buffer that data_offsets index. The reader trusts nothing in the header: every
// entry is checked against the file before a view into the mapping is handed out.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <tuple>

#include "core/limits.h"
#include "io/checkpoint.h"

namespace qs::io {
namespace {

using nlohmann::json;

// Upstream safetensors refuses headers over 100 MB; a larger length is a corrupt file, and
// refusing it early keeps us from parsing arbitrary bytes as JSON.
constexpr uint64_t kMaxHeaderBytes = limits::kMaxSafetensorsHeaderBytes;

// Reads a non-negative integer from a JSON number; false for floats, negatives and others.
bool as_u64(const json& v, uint64_t* out) {
  if (!v.is_number_unsigned()) return false;
  *out = v.get<uint64_t>();
  return true;
}

// Parses the header JSON; duplicate top-level keys are an error because either copy could be
// the one another reader keeps.
Result<json> parse_header(const std::string& path, const char* begin, const char* end) {
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(begin, end, on_event);
  } catch (const json::exception& e) {
    // parse_error, and also out_of_range for a number like 1e999.
    return data_loss(path + ": safetensors header is not valid JSON (" + e.what() + ")");
  }
  if (!duplicate.empty()) {
    return data_loss(path + ": safetensors header lists tensor '" + duplicate + "' twice");
  }
  if (!header.is_object()) {
    return data_loss(path + ": safetensors header must be a JSON object, found " +
                     std::string(header.type_name()));
  }
  return header;
}

Status parse_metadata(const std::string& path, const json& value,
                      std::map<std::string, std::string>* metadata) {
  if (!value.is_object()) {
    return data_loss(path + ": __metadata__ must be an object of strings, found " +
                     std::string(value.type_name()));
  }
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) {
      return data_loss(path + ": __metadata__ value '" + key + "' must be a string, found " +
                       std::string(v.type_name()));
    }
    if (metadata != nullptr) (*metadata)[key] = v.get<std::string>();
  }
  return ok_status();
}

struct ParsedEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin;
  uint64_t end;
};

Result<ParsedEntry> parse_entry(const std::string& path, const std::string& name,
                                const json& value) {
  const std::string where = path + ": tensor '" + name + "'";
  if (!value.is_object()) {
    return data_loss(where + ": entry must be an object, found " + std::string(value.type_name()));
  }
  ParsedEntry e{name, DType::kF32, {}, 0, 0};
  auto dtype_it = value.find("dtype");
  if (dtype_it == value.end() || !dtype_it->is_string()) {
    return data_loss(where + ": missing or non-string 'dtype'");
  }
  auto dtype = parse_dtype(dtype_it->get<std::string>());
  if (!dtype.ok()) return dtype.status().with_context(where);
  e.dtype = *dtype;

  auto shape_it = value.find("shape");
  if (shape_it == value.end() || !shape_it->is_array()) {
    return data_loss(where + ": missing or non-array 'shape'");
  }
  for (const auto& d : *shape_it) {
    uint64_t dim;
    if (!as_u64(d, &dim) || dim > static_cast<uint64_t>(INT64_MAX)) {
      return data_loss(where + ": shape " + shape_it->dump() + " must hold non-negative integers");
    }
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  auto numel = limits::checked_numel(e.shape, where);
  if (!numel.ok()) return data_loss(numel.status().message());

  auto off_it = value.find("data_offsets");
  if (off_it == value.end() || !off_it->is_array() || off_it->size() != 2 ||
      !as_u64((*off_it)[0], &e.begin) || !as_u64((*off_it)[1], &e.end)) {
    return data_loss(where + ": 'data_offsets' must be [begin, end] of non-negative integers");
  }
  if (e.begin > e.end) {
    return data_loss(where + ": data_offsets [" + std::to_string(e.begin) + ", " +
                     std::to_string(e.end) + "] end before they begin");
  }
  uint64_t expected_bytes;
  if (__builtin_mul_overflow(static_cast<uint64_t>(*numel), dtype_size(e.dtype), &expected_bytes)) {
    return data_loss(where + ": shape " + shape_string(e.shape) + " overflows 64 bits");
  }
  if (e.end - e.begin != expected_bytes) {
    return data_loss(where + ": data_offsets [" + std::to_string(e.begin) + ", " +
                     std::to_string(e.end) + "] span " + std::to_string(e.end - e.begin) +
                     " bytes, but " + dtype_name(e.dtype) + " " + shape_string(e.shape) +
                     " needs " + std::to_string(expected_bytes));
  }
  return e;
}

}  // namespace

Status read_safetensors(const std::shared_ptr<MappedFile>& file,
                        std::vector<std::pair<std::string, Tensor>>* tensors,
                        std::map<std::string, std::string>* metadata) {
  const std::string& path = file->path();
  const uint64_t file_size = file->size();
  if (file_size < 8) {
    return data_loss(path + ": truncated safetensors file (" + std::to_string(file_size) +
                     " bytes, the header length alone takes 8)");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file->data()[i];  // little-endian
  if (header_len > kMaxHeaderBytes) {
    return data_loss(path + ": safetensors header length " + std::to_string(header_len) +
                     " exceeds the 100 MB limit (corrupt or not a safetensors file)");
  }
  if (header_len > file_size - 8) {
    return data_loss(path + ": safetensors header length " + std::to_string(header_len) +
                     " runs past the end of the file (" + std::to_string(file_size) + " bytes)");
  }
  const char* header_begin = reinterpret_cast<const char*>(file->data()) + 8;
  QS_ASSIGN_OR_RETURN(json header, parse_header(path, header_begin, header_begin + header_len));

  std::vector<ParsedEntry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      QS_RETURN_IF_ERROR(parse_metadata(path, value, metadata));
      continue;
    }
    QS_ASSIGN_OR_RETURN(ParsedEntry e, parse_entry(path, key, value));
    entries.push_back(std::move(e));
  }

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file_size - data_start;
  // Sorted by position, every tensor must start at or after the end of the one before it.
  // Gaps are tolerated on read (nothing is lost), overlaps are not.
  std::vector<const ParsedEntry*> by_offset;
  by_offset.reserve(entries.size());
  for (const auto& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const ParsedEntry* a, const ParsedEntry* b) {
    return std::tie(a->begin, a->end, a->name) < std::tie(b->begin, b->end, b->name);
  });
  const ParsedEntry* previous = nullptr;
  for (const ParsedEntry* e : by_offset) {
    if (e->end > data_size) {
      return data_loss(path + ": tensor '" + e->name + "': data_offsets [" +
                       std::to_string(e->begin) + ", " + std::to_string(e->end) +
                       "] run past the end of the data (" + std::to_string(data_size) +
                       " bytes; file truncated?)");
    }
    if (previous != nullptr && e->begin < previous->end) {
      return data_loss(path + ": tensors '" + previous->name + "' [" +
                       std::to_string(previous->begin) + ", " + std::to_string(previous->end) +
                       ") and '" + e->name + "' [" + std::to_string(e->begin) + ", " +
                       std::to_string(e->end) + ") overlap");
    }
    previous = e;
  }

  // Views share ownership of the mapping. A tensor whose bytes are not aligned to its element
  // size (possible when a writer did not pad) is copied, so kernels may always use typed loads.
  std::shared_ptr<const void> owner(file, file->data());
  for (const auto& e : entries) {
    const uint8_t* bytes = file->data() + data_start + e.begin;
    Tensor t;
    t.dtype = e.dtype;
    t.shape = e.shape;
    if (reinterpret_cast<uintptr_t>(bytes) % dtype_size(e.dtype) == 0) {
      t.data = bytes;
      t.owner = owner;
    } else {
      t = Tensor::zeros(e.dtype, e.shape);
      std::memcpy(t.writable_data, bytes, t.nbytes());
    }
    tensors->emplace_back(e.name, std::move(t));
  }
  return ok_status();
}

Status write_safetensors(const std::string& path,
                         const std::vector<std::pair<std::string, Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") {
      return invalid_argument(path + ": '__metadata__' is reserved and cannot name a tensor");
    }
    if (header.contains(name)) {
      return invalid_argument(path + ": tensor '" + name + "' given twice");
    }
    for (int64_t d : t.shape) {
      if (d < 0) {
        return invalid_argument(path + ": tensor '" + name + "' has negative shape " +
                                shape_string(t.shape));
      }
    }
    const uint64_t n = t.nbytes();
    if (n > 0 && t.data == nullptr) {
      return invalid_argument(path + ": tensor '" + name + "' has no data");
    }
    json entry = json::object();
    entry["dtype"] = dtype_name(t.dtype);
    entry["shape"] = t.shape;
    entry["data_offsets"] = json::array({offset, offset + n});
    header[name] = std::move(entry);
    offset += n;
  }
  std::string text = header.dump();
  // Pad with spaces (as upstream does) so the data starts 8-byte aligned.
  text.resize((text.size() + 7) / 8 * 8, ' ');

  // Write beside the target and rename, so a crash never leaves a half-written checkpoint.
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return io_error("cannot write " + tmp + ": " + std::strerror(errno));
  uint8_t len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<uint8_t>(text.size() >> (8 * i));
  bool ok = std::fwrite(len_bytes, 1, 8, f) == 8 &&
            std::fwrite(text.data(), 1, text.size(), f) == text.size();
  for (const auto& [name, t] : tensors) {
    if (!ok) break;
    const size_t n = t.nbytes();
    ok = n == 0 || std::fwrite(t.data, 1, n, f) == n;
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    return io_error("short write to " + tmp + ": " + std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return io_error("cannot rename " + tmp + " to " + path + ": " + ec.message());
  }
  return ok_status();
}

}  // namespace qs::io
