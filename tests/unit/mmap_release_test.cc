// release_mapped_pages (core/mmap_file.h): after repacking, a checkpoint's pages are given
// back, yet every byte still reads the same; memory that is not a live mapping (the heap,
// where MADV_DONTNEED would zero it) and ranges that leave the mapping are refused untouched.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/mmap_file.h"

namespace qs {
namespace {

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
  EXPECT_TRUE(release_mapped_pages(data + 100, 6 * page));
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
