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

// Drops this process's pages of the whole pages inside [p, p + bytes) when that range lies in
// a live MappedFile: a caller that has copied the bytes elsewhere (repacked weights) stops
// paying resident memory for them twice. The data stays valid: a later read maps the pages
// again from the page cache or the file. Anything else (heap memory, where the same call
// would zero the bytes) is left alone. Returns whether pages were dropped.
bool release_mapped_pages(const void* p, size_t bytes);

Result<std::string> read_file(const std::string& path);
Status write_file(const std::string& path, const std::string& contents);

}  // namespace qs
