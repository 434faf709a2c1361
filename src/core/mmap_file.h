// core: read-only memory-mapped file. Checkpoint tensors point straight into the mapping
// (zero-copy); the mapping lives as long as any shared_ptr to it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace qs {

class MappedFile {
 public:
  static Result<std::shared_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

Result<std::string> read_file(const std::string& path);
Status write_file(const std::string& path, const std::string& contents);

}  // namespace qs
