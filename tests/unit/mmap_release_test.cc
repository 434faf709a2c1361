// release_mapped_pages (core/mmap_file.h): after repacking, a checkpoint's pages are given
// back (the kernel's page table for this process no longer maps them: /proc/self/pagemap),
// yet every byte still reads the same; memory that is not a live mapping (the heap,
// where MADV_DONTNEED would zero it) and ranges that leave the mapping are refused untouched.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/mmap_file.h"

namespace qs {
namespace {

// Whether each of `pages` pages from `p` is mapped in this process (bit 63 of its
// /proc/self/pagemap entry); nullopt where the kernel offers no pagemap.
std::optional<std::vector<bool>> present_pages(const void* p, size_t pages) {
  const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) / page;
  std::vector<bool> present(pages);
  for (size_t i = 0; i < pages; ++i) {
    uint64_t entry = 0;
    if (pread(fd, &entry, sizeof(entry), static_cast<off_t>((first + i) * sizeof(entry))) !=
        static_cast<ssize_t>(sizeof(entry))) {
      close(fd);
      return std::nullopt;
    }
    present[i] = (entry >> 63) & 1;
  }
  close(fd);
  return present;
}

std::string pattern(size_t bytes) {
  std::string s(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) s[i] = static_cast<char>((i * 131 + 7) & 0xff);
  return s;
}

TEST(ReleaseMappedPages, DroppedPagesReadTheSameBytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const std::string contents = pattern(8 * page + 123);
  const std::string path = ::testing::TempDir() + "/qs_mmap_release_test.bin";
  ASSERT_TRUE(write_file(path, contents).ok());
  auto f = MappedFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const uint8_t* data = (*f)->data();
  ASSERT_EQ(std::memcmp(data, contents.data(), contents.size()), 0);  // every page touched
  const size_t pages = (contents.size() + page - 1) / page;
  const auto before = present_pages(data, pages);
  if (!before) GTEST_SKIP() << "no /proc/self/pagemap on this kernel: cannot see pages dropped";
  for (size_t i = 0; i < pages; ++i) ASSERT_TRUE((*before)[i]) << "page " << i << " not faulted in";
  // Bytes 100 .. 100 + 6 pages cover whole pages 1..5 only: those go, pages 0 and 6.. stay.
  EXPECT_TRUE(release_mapped_pages(data + 100, 6 * page));
  const auto after = present_pages(data, pages);
  ASSERT_TRUE(after);
  for (size_t i = 0; i < pages; ++i) {
    EXPECT_EQ((*after)[i], i == 0 || i >= 6) << "page " << i;
  }
  EXPECT_EQ(std::memcmp(data, contents.data(), contents.size()), 0);
  // A range shorter than a whole page has nothing to drop; one past the end is refused.
  EXPECT_FALSE(release_mapped_pages(data + 10, page / 2));
  EXPECT_FALSE(release_mapped_pages(data + page, contents.size()));
  f->reset();
  // Once unmapped, the same addresses are no longer a mapping of ours.
  EXPECT_FALSE(release_mapped_pages(data, 2 * page));
  unlink(path.c_str());
}

TEST(ReleaseMappedPages, HeapMemoryIsLeftAlone) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const std::string contents = pattern(16 * page);
  std::vector<uint8_t> heap(contents.begin(), contents.end());
  EXPECT_FALSE(release_mapped_pages(heap.data(), heap.size()));
  EXPECT_EQ(std::memcmp(heap.data(), contents.data(), contents.size()), 0);
}

}  // namespace
}  // namespace qs
