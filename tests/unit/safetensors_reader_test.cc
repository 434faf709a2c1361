// Unit tests for the safetensors reader's validation: every malformed file is written by hand
// into a temp dir and must give a precise error (naming the file and, where one is involved,
// the tensor), never a crash. Also the happy path of a hand-built file, byte for byte.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include "core/mmap_file.h"
#include "io/checkpoint.h"

namespace qs::io {
namespace {

namespace fs = std::filesystem;

class SafetensorsReader : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "qs_st_reader_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A file made of the u64 length of `header`, `header`, then `data`.
  std::string write_raw(const std::string& header, const std::string& data,
                        uint64_t header_len_override = UINT64_MAX) {
    const uint64_t len = header_len_override == UINT64_MAX ? header.size() : header_len_override;
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(len >> (8 * i));
    bytes += header + data;
    const std::string path = (fs::path(dir_) / "model.safetensors").string();
    EXPECT_TRUE(write_file(path, bytes).ok());
    return path;
  }

  // Reads `path`; returns the error message ("" on success).
  std::string read_error(const std::string& path) {
    auto file = MappedFile::open(path);
    EXPECT_TRUE(file.ok()) << file.status().to_string();
    std::vector<std::pair<std::string, Tensor>> tensors;
    std::map<std::string, std::string> metadata;
    Status s = read_safetensors(*file, &tensors, &metadata);
    if (s.ok()) return "";
    EXPECT_EQ(s.message().find(path), 0u) << "error must start with the file: " << s.message();
    return s.message();
  }

  std::string dir_;
};

TEST_F(SafetensorsReader, ReadsHandBuiltFile) {
  // Two F32 tensors and one BF16, with metadata and space padding as upstream writes it.
  std::string data(4 * 6 + 2 * 2, '\0');
  const float a[6] = {1, 2, 3, 4, 5, 6};
  const float b = -0.5f;
  std::memcpy(data.data(), a, 20);         // a: [5] at [0, 20)
  std::memcpy(data.data() + 20, &b, 4);    // b: [1] at [20, 24)
  const uint16_t c[2] = {0x3f80, 0xc000};  // bf16 1.0, -2.0
  std::memcpy(data.data() + 24, c, 4);     // c: [2] at [24, 28)
  const std::string path = write_raw(
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[5],"data_offsets":[0,20]},)"
      R"("b":{"dtype":"F32","shape":[1,1],"data_offsets":[20,24]},)"
      R"("c":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]}}     )",
      data);
  auto file = MappedFile::open(path);
  ASSERT_TRUE(file.ok());
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> metadata;
  ASSERT_TRUE(read_safetensors(*file, &tensors, &metadata).ok());
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_EQ(metadata.at("format"), "pt");
  std::map<std::string, Tensor> by_name(tensors.begin(), tensors.end());
  EXPECT_EQ(by_name["a"].shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(by_name["a"].to_f32(), (std::vector<float>{1, 2, 3, 4, 5}));
  EXPECT_EQ(by_name["b"].shape, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(by_name["b"].to_f32(), (std::vector<float>{-0.5f}));
  EXPECT_EQ(by_name["c"].dtype, DType::kBF16);
  EXPECT_EQ(by_name["c"].to_f32(), (std::vector<float>{1.0f, -2.0f}));
}

TEST_F(SafetensorsReader, ViewsAreZeroCopyAndKeepTheMappingAlive) {
  std::string data(8, '\0');
  const float v[2] = {7.0f, 8.0f};
  std::memcpy(data.data(), v, 8);
  std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  header.resize((header.size() + 7) / 8 * 8, ' ');  // aligned, as writers pad it
  const std::string path = write_raw(header, data);
  Tensor x;
  {
    auto file = MappedFile::open(path);
    ASSERT_TRUE(file.ok());
    std::vector<std::pair<std::string, Tensor>> tensors;
    ASSERT_TRUE(read_safetensors(*file, &tensors, nullptr).ok());
    x = tensors[0].second;
    EXPECT_GE(static_cast<const uint8_t*>(x.data), (*file)->data());
    EXPECT_LT(static_cast<const uint8_t*>(x.data), (*file)->data() + (*file)->size());
  }
  fs::remove(path);  // the mapping outlives both the file name and the MappedFile handle
  EXPECT_EQ(x.to_f32(), (std::vector<float>{7.0f, 8.0f}));
}

TEST_F(SafetensorsReader, MisalignedTensorIsCopiedAligned) {
  // Pad the header so the data starts at 1 mod 8: an F32 at [0, 4) is then misaligned.
  std::string data(4, '\0');
  const float v = 3.25f;
  std::memcpy(data.data(), &v, 4);
  std::string header = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  while ((8 + header.size()) % 8 != 1) header += ' ';
  const std::string path = write_raw(header, data);
  auto file = MappedFile::open(path);
  ASSERT_TRUE(file.ok());
  std::vector<std::pair<std::string, Tensor>> tensors;
  ASSERT_TRUE(read_safetensors(*file, &tensors, nullptr).ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tensors[0].second.data) % 4, 0u);
  EXPECT_EQ(tensors[0].second.to_f32(), (std::vector<float>{3.25f}));
}

TEST_F(SafetensorsReader, EmptyFile) {
  EXPECT_NE(read_error(write_raw("", "")).find("header is not valid JSON"), std::string::npos);
  const std::string path = (fs::path(dir_) / "empty.safetensors").string();
  ASSERT_TRUE(write_file(path, "abc").ok());
  EXPECT_NE(read_error(path).find("truncated safetensors file (3 bytes"), std::string::npos);
}

TEST_F(SafetensorsReader, HeaderLengthPastEof) {
  const std::string path =
      write_raw(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "abcd", 1000);
  EXPECT_NE(read_error(path).find("header length 1000 runs past the end of the file"),
            std::string::npos);
}

TEST_F(SafetensorsReader, HugeHeaderLength) {
  const std::string path = write_raw("{}", "", 1ull << 62);
  EXPECT_NE(read_error(path).find("exceeds the 100 MB limit"), std::string::npos);
}

TEST_F(SafetensorsReader, JsonGarbage) {
  EXPECT_NE(read_error(write_raw("{\"x\": [1, 2", "")).find("header is not valid JSON"),
            std::string::npos);
  EXPECT_NE(read_error(write_raw("\xff\xfe garbage", "")).find("header is not valid JSON"),
            std::string::npos);
  EXPECT_NE(read_error(write_raw("[1, 2]", "")).find("must be a JSON object, found array"),
            std::string::npos);
}

TEST_F(SafetensorsReader, DuplicateName) {
  const std::string msg =
      read_error(write_raw(R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                           R"("x":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                           "ab"));
  EXPECT_NE(msg.find("lists tensor 'x' twice"), std::string::npos) << msg;
}

TEST_F(SafetensorsReader, UnknownDtype) {
  const std::string msg =
      read_error(write_raw(R"({"w":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", "a"));
  EXPECT_NE(msg.find("tensor 'w': unknown dtype 'F4'"), std::string::npos) << msg;
}

TEST_F(SafetensorsReader, MalformedEntries) {
  struct Case {
    const char* header;
    const char* expect;
  };
  const Case cases[] = {
      {R"({"w":5})", "tensor 'w': entry must be an object"},
      {R"({"w":{"shape":[1],"data_offsets":[0,1]}})", "tensor 'w': missing or non-string 'dtype'"},
      {R"({"w":{"dtype":"U8","data_offsets":[0,1]}})", "tensor 'w': missing or non-array 'shape'"},
      {R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})",
       "tensor 'w': shape [-1] must hold non-negative integers"},
      {R"({"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})",
       "must hold non-negative integers"},
      {R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,1]}})",
       "has more than 2^40 elements"},
      {R"({"w":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}})",
       "rank 9 is above the limit of 8"},
      {R"({"w":{"dtype":"U8","shape":[1]}})", "tensor 'w': 'data_offsets' must be [begin, end]"},
      {R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", "'data_offsets' must be"},
      {R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[1,0]}})",
       "data_offsets [1, 0] end before they begin"},
      {R"({"__metadata__":{"format":1}})", "__metadata__ value 'format' must be a string"},
      {R"({"__metadata__":[1]})", "__metadata__ must be an object of strings"},
  };
  for (const auto& c : cases) {
    const std::string msg = read_error(write_raw(c.header, "abcd"));
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.header << " -> " << msg;
  }
}

TEST_F(SafetensorsReader, OffsetsNotMatchingDtypeTimesShape) {
  const std::string msg = read_error(write_raw(
      R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,8]}})", std::string(12, 'a')));
  EXPECT_NE(msg.find("tensor 'w': data_offsets [0, 8] span 8 bytes, but BF16 [2, 3] needs 12"),
            std::string::npos)
      << msg;
}

TEST_F(SafetensorsReader, OffsetsOutOfBounds) {
  // Also the shape of a truncated file: the header promises more data than is there.
  const std::string msg =
      read_error(write_raw(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                           R"("w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                           std::string(10, 'a')));
  EXPECT_NE(msg.find("tensor 'w': data_offsets [4, 12] run past the end of the data (10 bytes"),
            std::string::npos)
      << msg;
}

TEST_F(SafetensorsReader, OverlappingOffsets) {
  const std::string msg =
      read_error(write_raw(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                           std::string(8, 'a')));
  EXPECT_NE(msg.find("tensors 'a' [0, 4) and 'b' [2, 6) overlap"), std::string::npos) << msg;
}

TEST_F(SafetensorsReader, EmptyTensorAndGapsAreAccepted) {
  const std::string path = write_raw(R"({"e":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]},)"
                                     R"("b":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}})",
                                     std::string(8, 'z'));
  EXPECT_EQ(read_error(path), "");
}

// Every truncation of a valid file, and random byte corruptions of its header, must give a
// Status (or a still-consistent file), never a crash or an out-of-bounds view. Run under the
// sanitizer build this also catches reads past the mapping.
TEST_F(SafetensorsReader, TruncationsAndCorruptionsNeverCrash) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.emplace_back("a", Tensor::from_f32(DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6}));
  tensors.emplace_back("b", Tensor::from_f32(DType::kBF16, {3}, {1, 2, 3}));
  tensors.emplace_back("c", Tensor::zeros(DType::kI64, {2}));
  const std::string good = (fs::path(dir_) / "good.safetensors").string();
  ASSERT_TRUE(write_safetensors(good, tensors, {{"format", "pt"}}).ok());
  auto bytes = read_file(good);
  ASSERT_TRUE(bytes.ok());
  const std::string bad = (fs::path(dir_) / "bad.safetensors").string();
  // File writes are the cost here, so lengths are sampled: every one around the header
  // length field, a stride through the middle, and every one near the end.
  for (size_t len = 0; len < bytes->size(); len += (len < 16 || len + 16 > bytes->size()) ? 1 : 7) {
    ASSERT_TRUE(write_file(bad, bytes->substr(0, len)).ok());
    EXPECT_NE(read_error(bad), "") << "truncated to " << len << " bytes";
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>((*bytes)[i]);
  std::mt19937 rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    std::string corrupt = *bytes;
    const size_t pos = rng() % (8 + header_len);
    corrupt[pos] = static_cast<char>(rng());
    ASSERT_TRUE(write_file(bad, corrupt).ok());
    auto file = MappedFile::open(bad);
    ASSERT_TRUE(file.ok());
    std::vector<std::pair<std::string, Tensor>> out;
    if (!read_safetensors(*file, &out, nullptr).ok()) continue;
    uint64_t corrupt_len = 0;
    for (int i = 7; i >= 0; --i)
      corrupt_len = (corrupt_len << 8) | static_cast<uint8_t>(corrupt[i]);
    const uint8_t* begin = (*file)->data();
    const uint8_t* end = begin + (*file)->size();
    for (const auto& [name, t] : out) {
      // A view must lie inside the data section; a copy lies outside the mapping entirely.
      const auto* p = static_cast<const uint8_t*>(t.data);
      if (p >= begin && p < end) {
        EXPECT_GE(p, begin + 8 + corrupt_len) << name;
        EXPECT_LE(p + t.nbytes(), end) << name;
      }
    }
  }
}

}  // namespace
}  // namespace qs::io
