// core: mmap wrapper and whole-file helpers.
#include "core/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

namespace qs {
namespace {

// The live mappings, by start address, so that release_mapped_pages can tell a mapped range
// from any other memory.
struct Mappings {
  std::mutex mu;
  std::map<uintptr_t, size_t> ranges;
};

Mappings& mappings() {
  static Mappings* m = new Mappings();  // never destroyed: mappings may outlive statics
  return *m;
}

}  // namespace

Result<std::shared_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open " + path + ": " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return io_error("cannot stat " + path + ": " + std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return io_error(path + " is a directory, expected a file");
  }
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return io_error("cannot mmap " + path + ": " + std::strerror(err));
    }
    f->data_ = static_cast<const uint8_t*>(p);
    Mappings& m = mappings();
    std::lock_guard<std::mutex> lock(m.mu);
    m.ranges[reinterpret_cast<uintptr_t>(p)] = f->size_;
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (data_ == nullptr) return;
  {
    Mappings& m = mappings();
    std::lock_guard<std::mutex> lock(m.mu);
    m.ranges.erase(reinterpret_cast<uintptr_t>(data_));
  }
  munmap(const_cast<uint8_t*>(data_), size_);
}

bool release_mapped_pages(const void* p, size_t bytes) {
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t end = begin + bytes;
  Mappings& m = mappings();
  std::lock_guard<std::mutex> lock(m.mu);
  auto it = m.ranges.upper_bound(begin);
  if (it == m.ranges.begin()) return false;
  --it;
  if (end > it->first + it->second) return false;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
  if (first >= last) return false;
  // MADV_DONTNEED on a private, never written file mapping only unmaps: the next access
  // reads the file's pages again.
  return madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) == 0;
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot open " + path + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status write_file(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return io_error("cannot write " + path + ": " + std::strerror(errno));
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  if (!out) return io_error("short write to " + path);
  return ok_status();
}

}  // namespace qs
