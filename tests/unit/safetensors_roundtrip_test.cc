// Unit tests for the safetensors writer: write -> read round trips for every dtype must give
// back the same names, dtypes, shapes and bytes, and the file must follow the layout other
// readers expect (8-byte aligned data start, contiguous offsets in the order given).
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

class SafetensorsRoundTrip : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "qs_st_rt_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }
  std::string dir_;
};

// A tensor of `dtype` and `shape` filled with random bytes (every bit pattern must survive).
Tensor random_tensor(DType dtype, std::vector<int64_t> shape, std::mt19937* rng) {
  Tensor t = Tensor::zeros(dtype, std::move(shape));
  auto* p = t.mutable_ptr<uint8_t>();
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>((*rng)());
  return t;
}

TEST_F(SafetensorsRoundTrip, EveryDtype) {
  const DType kAll[] = {DType::kF32,    DType::kF16, DType::kBF16, DType::kF8E4M3,
                        DType::kF8E5M2, DType::kI8,  DType::kU8,   DType::kI16,
                        DType::kI32,    DType::kI64, DType::kBool};
  std::mt19937 rng(1234);
  std::vector<std::pair<std::string, Tensor>> written;
  // Odd sizes first so later tensors start unaligned unless the reader copes.
  for (DType t : kAll) {
    written.emplace_back(std::string("t.") + dtype_name(t), random_tensor(t, {3, 5}, &rng));
  }
  written.emplace_back("scalar", random_tensor(DType::kF32, {}, &rng));
  written.emplace_back("empty", Tensor::zeros(DType::kBF16, {0, 7}));
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "round trip"}};
  ASSERT_TRUE(write_safetensors(path("a.safetensors"), written, meta).ok());

  auto file = MappedFile::open(path("a.safetensors"));
  ASSERT_TRUE(file.ok());
  std::vector<std::pair<std::string, Tensor>> read;
  std::map<std::string, std::string> read_meta;
  ASSERT_TRUE(read_safetensors(*file, &read, &read_meta).ok());
  EXPECT_EQ(read_meta, meta);
  ASSERT_EQ(read.size(), written.size());
  std::map<std::string, Tensor> by_name(read.begin(), read.end());
  for (const auto& [name, w] : written) {
    ASSERT_EQ(by_name.count(name), 1u) << name;
    const Tensor& r = by_name[name];
    EXPECT_EQ(r.dtype, w.dtype) << name;
    EXPECT_EQ(r.shape, w.shape) << name;
    ASSERT_EQ(r.nbytes(), w.nbytes()) << name;
    EXPECT_EQ(std::memcmp(r.data, w.data, w.nbytes()), 0) << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r.data) % dtype_size(r.dtype), 0u) << name;
  }
}

TEST_F(SafetensorsRoundTrip, LayoutMatchesUpstream) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.emplace_back("z", Tensor::from_f32(DType::kF32, {2}, {1.0f, 2.0f}));
  tensors.emplace_back("a", Tensor::from_f32(DType::kF16, {3}, {1.0f, 2.0f, 3.0f}));
  ASSERT_TRUE(write_safetensors(path("b.safetensors"), tensors).ok());
  auto bytes = read_file(path("b.safetensors"));
  ASSERT_TRUE(bytes.ok());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>((*bytes)[i]);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(bytes->size(), 8 + n + 8 + 6);
  auto header = nlohmann::json::parse(bytes->substr(8, n));
  // Offsets follow the order given, not the (sorted) order of the JSON keys.
  EXPECT_EQ(header["z"]["data_offsets"], nlohmann::json::array({0, 8}));
  EXPECT_EQ(header["a"]["data_offsets"], nlohmann::json::array({8, 14}));
  EXPECT_EQ(header["a"]["dtype"], "F16");
  EXPECT_FALSE(header.contains("__metadata__"));
  float z0;
  std::memcpy(&z0, bytes->data() + 8 + n, 4);
  EXPECT_EQ(z0, 1.0f);
  EXPECT_FALSE(fs::exists(path("b.safetensors.tmp")));
}

TEST_F(SafetensorsRoundTrip, WriterRejectsBadInput) {
  std::vector<std::pair<std::string, Tensor>> dup;
  dup.emplace_back("x", Tensor::zeros(DType::kF32, {1}));
  dup.emplace_back("x", Tensor::zeros(DType::kF32, {1}));
  Status s = write_safetensors(path("c.safetensors"), dup);
  EXPECT_NE(s.message().find("tensor 'x' given twice"), std::string::npos) << s.message();

  std::vector<std::pair<std::string, Tensor>> reserved;
  reserved.emplace_back("__metadata__", Tensor::zeros(DType::kF32, {1}));
  EXPECT_FALSE(write_safetensors(path("c.safetensors"), reserved).ok());

  std::vector<std::pair<std::string, Tensor>> no_data(1);
  no_data[0].first = "w";
  no_data[0].second.shape = {4};
  s = write_safetensors(path("c.safetensors"), no_data);
  EXPECT_NE(s.message().find("tensor 'w' has no data"), std::string::npos) << s.message();

  s = write_safetensors(path("missing_dir/c.safetensors"), {});
  EXPECT_EQ(s.code(), StatusCode::kIo);
  EXPECT_FALSE(fs::exists(path("c.safetensors")));
}

}  // namespace
}  // namespace qs::io
