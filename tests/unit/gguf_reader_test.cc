// unit: the GGUF reader and the ggml dequantizers on a small GGUF this test writes byte by
// byte: typed metadata (scalars, arrays, strings), one tensor of every importable type checked
// against dequantized values worked out by hand from the documented block layouts, and
// malformed files (bad magic/version, truncation at every byte, impossible counts and
// lengths, bad dims/types/offsets, overlaps, duplicates, single-byte corruption), each an
// error naming the field, never a crash.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "core/mmap_file.h"
#include "io/gguf.h"

namespace qs::io {
namespace {

// Little-endian GGUF image builder.
class Writer {
 public:
  template <typename T>
  Writer& put(T v) {
    const size_t at = buf.size();
    buf.resize(at + sizeof(T));
    std::memcpy(buf.data() + at, &v, sizeof(T));
    return *this;
  }
  Writer& str(const std::string& s) {
    put<uint64_t>(s.size());
    buf += s;
    return *this;
  }
  Writer& key(const std::string& k, GgufValueType t) {
    str(k);
    return put<uint32_t>(static_cast<uint32_t>(t));
  }
  Writer& bytes(const std::vector<uint8_t>& b) {
    buf.append(reinterpret_cast<const char*>(b.data()), b.size());
    return *this;
  }
  void pad(size_t alignment) {
    while (buf.size() % alignment) buf.push_back('\0');
  }
  std::string buf;
};

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type;
  std::vector<uint8_t> data;
};

std::vector<uint8_t> f16s(const std::vector<float>& v) {
  std::vector<uint8_t> out;
  for (float x : v) {
    const uint16_t h = f32_to_f16(x);
    out.push_back(h & 0xFF);
    out.push_back(h >> 8);
  }
  return out;
}

// Q4_0: d = 0.5, qs[j] = j | (15 - j) << 4: value j = 0.5 (j - 8), value j + 16 = 0.5 (7 - j).
TensorSpec q4_0() {
  std::vector<uint8_t> b = f16s({0.5f});
  for (int j = 0; j < 16; ++j) b.push_back(static_cast<uint8_t>(j | (15 - j) << 4));
  return {"q4_0", {32}, 2, b};
}
// Q4_1: d = 0.25, m = -1, same nibbles: value j = 0.25 j - 1, value j + 16 = 0.25 (15-j) - 1.
TensorSpec q4_1() {
  std::vector<uint8_t> b = f16s({0.25f, -1.0f});
  for (int j = 0; j < 16; ++j) b.push_back(static_cast<uint8_t>(j | (15 - j) << 4));
  return {"q4_1", {32}, 3, b};
}
// Q8_0: two blocks (a 64-wide row), d = 2 then 0.125, q = j - 16.
TensorSpec q8_0() {
  std::vector<uint8_t> b;
  for (float d : {2.0f, 0.125f}) {
    auto h = f16s({d});
    b.insert(b.end(), h.begin(), h.end());
    for (int j = 0; j < 32; ++j) b.push_back(static_cast<uint8_t>(static_cast<int8_t>(j - 16)));
  }
  return {"q8_0", {64}, 8, b};
}
// Q4_K: d = 1, dmin = 0.5; the 12 scale bytes below unpack (by hand, ggml's get_scale_min_k4)
// to sc = {1, 2, 3, 4, 17, 3, 5, 7} and m = {5, 6, 7, 8, 2, 4, 6, 56}; qs[i] = 7i mod 256.
const uint8_t kQ4KScales[12] = {65, 2, 3, 4, 5, 6, 7, 200, 0x21, 0x43, 0x65, 0x87};
const int kQ4KSc[8] = {1, 2, 3, 4, 17, 3, 5, 7};
const int kQ4KM[8] = {5, 6, 7, 8, 2, 4, 6, 56};
TensorSpec q4_k() {
  std::vector<uint8_t> b = f16s({1.0f, 0.5f});
  b.insert(b.end(), kQ4KScales, kQ4KScales + 12);
  for (int i = 0; i < 128; ++i) b.push_back(static_cast<uint8_t>(7 * i));
  return {"q4_k", {256}, 12, b};
}
// Q6_K: ql[i] = 3i, qh[i] = 5i (mod 256), scales[i] = i - 8, d = 0.5.
TensorSpec q6_k() {
  std::vector<uint8_t> b;
  for (int i = 0; i < 128; ++i) b.push_back(static_cast<uint8_t>(3 * i));
  for (int i = 0; i < 64; ++i) b.push_back(static_cast<uint8_t>(5 * i));
  for (int i = 0; i < 16; ++i) b.push_back(static_cast<uint8_t>(static_cast<int8_t>(i - 8)));
  auto d = f16s({0.5f});
  b.insert(b.end(), d.begin(), d.end());
  return {"q6_k", {256}, 14, b};
}
TensorSpec f32_2x3() {
  std::vector<uint8_t> b(24);
  const float v[6] = {1.5f, -2.0f, 0.0f, 3.25f, -0.5f, 1e-3f};
  std::memcpy(b.data(), v, 24);
  return {"f32", {3, 2}, 0, b};  // ne = [3, 2]: two rows of three
}
TensorSpec f16_t() {
  return {"f16", {2}, 1, {0x00, 0x3C, 0x00, 0xC0}};
}  // 1, -2
TensorSpec bf16_t() {
  return {"bf16", {2}, 30, {0x80, 0x3F, 0x40, 0x40}};
}  // 1, 3

std::vector<TensorSpec> all_tensors() {
  return {f32_2x3(), f16_t(), bf16_t(), q4_0(), q4_1(), q8_0(), q4_k(), q6_k()};
}

// A valid file: metadata of every scalar type plus arrays, then `tensors`, 32-aligned.
std::string build(const std::vector<TensorSpec>& tensors, uint32_t version = 3) {
  Writer w;
  w.put<uint32_t>(0x46554747).put<uint32_t>(version).put<uint64_t>(tensors.size());
  w.put<uint64_t>(10);
  w.key("general.architecture", GgufValueType::kString).str("llama");
  w.key("u8", GgufValueType::kU8).put<uint8_t>(200);
  w.key("i16", GgufValueType::kI16).put<int16_t>(-300);
  w.key("u32", GgufValueType::kU32).put<uint32_t>(4000000000u);
  w.key("f32", GgufValueType::kF32).put<float>(0.25f);
  w.key("flag", GgufValueType::kBool).put<uint8_t>(1);
  w.key("i64", GgufValueType::kI64).put<int64_t>(-5);
  w.key("no_token", GgufValueType::kU32).put<uint32_t>(0xFFFFFFFFu);  // llama.cpp's "none"
  w.key("names", GgufValueType::kArray).put<uint32_t>(8).put<uint64_t>(2).str("a").str("bc");
  w.key("scores", GgufValueType::kArray).put<uint32_t>(6).put<uint64_t>(3);
  w.put<float>(1.0f).put<float>(-2.0f).put<float>(0.5f);
  uint64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    w.str(t.name).put<uint32_t>(t.ne.size());
    for (uint64_t d : t.ne) w.put<uint64_t>(d);
    w.put<uint32_t>(t.type).put<uint64_t>(offset);
    offset += (t.data.size() + 31) / 32 * 32;
  }
  w.pad(32);
  // Padding between tensors, none after the last: the file ends where its data ends.
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (i > 0) w.pad(32);
    w.bytes(tensors[i].data);
  }
  return w.buf;
}

Result<GgufFile> parse(const std::string& image) {
  return GgufFile::parse(nullptr, reinterpret_cast<const uint8_t*>(image.data()), image.size(),
                         "test.gguf");
}

std::vector<float> dequant(const GgufFile& g, const std::string& name) {
  const GgufTensorInfo* t = g.find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  return t ? g.dequantize(*t) : std::vector<float>{};
}

TEST(GgufReader, MetadataOfEveryType) {
  const std::string image = build(all_tensors(), 2);
  auto g = parse(image);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->version(), 2u);
  EXPECT_EQ(*g->get_string("general.architecture"), "llama");
  EXPECT_EQ(*g->get_int("u8"), 200);
  EXPECT_EQ(*g->get_int("i16"), -300);
  EXPECT_EQ(*g->get_int("u32"), 4000000000ll);
  EXPECT_EQ(*g->get_float("f32"), 0.25);
  EXPECT_TRUE(*g->get_bool("flag"));
  EXPECT_EQ(*g->get_int("i64"), -5);
  EXPECT_EQ(*g->get_string_array("names"), (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(*g->get_float_array("scores"), (std::vector<double>{1.0, -2.0, 0.5}));
  // Wrong types and missing keys name the key and both types.
  auto bad = g->get_int("names");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'names' is array of string, expected an integer"),
            std::string::npos)
      << bad.status().message();
  EXPECT_NE(g->get_string("nope").status().message().find("'nope' not found"), std::string::npos);
  EXPECT_EQ(*g->get_token_id("u8", 256), 200);
  EXPECT_FALSE(g->get_token_id("u8", 100).ok());
  EXPECT_FALSE(g->get_token_id("u32", 5).ok());
  EXPECT_EQ(*g->get_token_id("no_token", 5), -1);
  EXPECT_EQ(*g->get_token_id("absent", 5), -1);
}

TEST(GgufReader, DequantizesEveryTypeAsWorkedOutByHand) {
  const std::string image = build(all_tensors());
  auto g = parse(image);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  ASSERT_EQ(g->tensors().size(), 8u);
  const GgufTensorInfo* f32 = g->find_tensor("f32");
  EXPECT_EQ(f32->hf_shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(dequant(*g, "f32"), (std::vector<float>{1.5f, -2.0f, 0.0f, 3.25f, -0.5f, 1e-3f}));
  EXPECT_EQ(dequant(*g, "f16"), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(dequant(*g, "bf16"), (std::vector<float>{1.0f, 3.0f}));

  std::vector<float> v = dequant(*g, "q4_0");
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(v[j], 0.5f * (j - 8)) << j;
    EXPECT_EQ(v[j + 16], 0.5f * (7 - j)) << j;
  }
  v = dequant(*g, "q4_1");
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(v[j], 0.25f * j - 1.0f) << j;
    EXPECT_EQ(v[j + 16], 0.25f * (15 - j) - 1.0f) << j;
  }
  v = dequant(*g, "q8_0");
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(v[j], 2.0f * (j - 16)) << j;
    EXPECT_EQ(v[32 + j], 0.125f * (j - 16)) << j;
  }
  // Q4_K: value 64c + l (l < 32) is the low nibble of qs[32c + l] in sub-block 2c, value
  // 64c + 32 + l its high nibble in sub-block 2c + 1.
  v = dequant(*g, "q4_k");
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int q = (7 * (32 * c + l)) & 0xFF;
      EXPECT_FLOAT_EQ(v[64 * c + l], 1.0f * kQ4KSc[2 * c] * (q & 0xF) - 0.5f * kQ4KM[2 * c]);
      EXPECT_FLOAT_EQ(v[64 * c + 32 + l],
                      1.0f * kQ4KSc[2 * c + 1] * (q >> 4) - 0.5f * kQ4KM[2 * c + 1]);
    }
  }
  // Q6_K, value by value: half h, quarter k, lane l of value 128h + 32k + l.
  v = dequant(*g, "q6_k");
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, k = (i % 128) / 32, l = i % 32;
    const int ql = (3 * (64 * h + l + (k % 2) * 32)) & 0xFF;
    const int qh = (5 * (32 * h + l)) & 0xFF;
    const int lo = k < 2 ? (ql & 0xF) : (ql >> 4);
    const int q = (lo | ((qh >> (2 * k)) & 3) << 4) - 32;
    const int scale = 8 * h + l / 16 + 2 * k - 8;
    EXPECT_EQ(v[i], 0.5f * scale * q) << i;
  }
}

TEST(GgufReader, OpensAFileFromDisk) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("qs_gguf_reader_" + std::to_string(getpid()) + ".gguf");
  ASSERT_TRUE(write_file(path.string(), build(all_tensors())).ok());
  auto g = GgufFile::open(path.string());
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(dequant(*g, "bf16"), (std::vector<float>{1.0f, 3.0f}));
  std::filesystem::remove(path);
  EXPECT_FALSE(GgufFile::open(path.string()).ok());
}

void expect_error(const std::string& image, const std::string& needle) {
  auto g = parse(image);
  ASSERT_FALSE(g.ok()) << "expected an error containing: " << needle;
  EXPECT_NE(g.status().message().find(needle), std::string::npos)
      << "expected '" << needle << "' in: " << g.status().message();
}

// Header of a file whose first metadata value is written by the caller.
Writer header(uint64_t n_tensors, uint64_t n_kv) {
  Writer w;
  w.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
  return w;
}

TEST(GgufReader, MalformedHeadersAndMetadata) {
  std::string image = build({f16_t()});
  std::string bad = image;
  bad[0] = 'X';
  expect_error(bad, "magic");
  for (uint32_t version : {1u, 4u}) expect_error(build({f16_t()}, version), "version");
  expect_error(header(0, 1ull << 60).buf, "metadata_kv_count");
  expect_error(header(1ull << 60, 0).buf, "tensor_count");
  Writer w = header(0, 1);
  w.put<uint64_t>(1ull << 40);  // key length
  w.buf.append(16, 'x');
  expect_error(w.buf, "exceeds");
  w = header(0, 1);
  w.key("k", static_cast<GgufValueType>(13)).put<uint8_t>(0);
  expect_error(w.buf, "unknown value type 13");
  w = header(0, 1);
  w.key("arr", GgufValueType::kArray).put<uint32_t>(4).put<uint64_t>(1ull << 61);
  expect_error(w.buf, "length of 'arr'");
  w = header(0, 1);
  w.key("arr", GgufValueType::kArray).put<uint32_t>(9).put<uint64_t>(1);
  expect_error(w.buf, "element type of 'arr'");
  w = header(0, 1);
  w.key("b", GgufValueType::kBool).put<uint8_t>(2);
  expect_error(w.buf, "not 0 or 1");
  w = header(0, 2);
  w.key("k", GgufValueType::kU8).put<uint8_t>(1).key("k", GgufValueType::kU8).put<uint8_t>(2);
  expect_error(w.buf, "duplicate key 'k'");
  w = header(0, 1);
  w.key("s", GgufValueType::kString).put<uint64_t>(100);
  w.buf.append(16, 'x');
  expect_error(w.buf, "value of 's'");
  w = header(0, 1);
  w.key("general.alignment", GgufValueType::kU32).put<uint32_t>(24);
  expect_error(w.buf, "general.alignment 24");
}

// One tensor info after an empty metadata section.
std::string one_tensor(uint32_t n_dims, std::vector<uint64_t> ne, uint32_t type, uint64_t offset,
                       size_t data_bytes) {
  Writer w = header(1, 0);
  w.str("t").put<uint32_t>(n_dims);
  for (uint64_t d : ne) w.put<uint64_t>(d);
  w.put<uint32_t>(type).put<uint64_t>(offset);
  w.pad(32);
  w.buf.append(data_bytes, '\0');
  return w.buf;
}

TEST(GgufReader, MalformedTensorInfos) {
  EXPECT_TRUE(parse(one_tensor(1, {32}, 8, 0, 34)).ok());
  expect_error(one_tensor(0, {}, 0, 0, 64), "n_dims");
  expect_error(one_tensor(5, {1, 1, 1, 1, 1}, 0, 0, 64), "n_dims");
  expect_error(one_tensor(1, {0}, 0, 0, 64), "is zero or too large");
  expect_error(one_tensor(2, {1ull << 40, 1ull << 40}, 0, 0, 64), "is zero or too large");
  expect_error(one_tensor(1, {256}, 10, 0, 1024), "Q2_K) is not supported");
  expect_error(one_tensor(1, {256}, 999, 0, 1024), "ggml type 999");
  expect_error(one_tensor(1, {48}, 2, 0, 64), "not a multiple of the Q4_0 block size 32");
  expect_error(one_tensor(1, {32}, 8, 8, 64), "not a multiple of the alignment");
  expect_error(one_tensor(1, {32}, 8, 0, 33), "run past");
  expect_error(one_tensor(1, {32}, 8, 1ull << 62, 64), "run past");
  // Two tensors over the same bytes, and two of the same name.
  Writer w = header(2, 0);
  for (const char* name : {"a", "b"})
    w.str(name).put<uint32_t>(1).put<uint64_t>(64).put<uint32_t>(0).put<uint64_t>(0);
  w.pad(32);
  w.buf.append(512, '\0');
  expect_error(w.buf, "overlap");
  w = header(2, 0);
  for (uint64_t off : {0, 256})
    w.str("a").put<uint32_t>(1).put<uint64_t>(64).put<uint32_t>(0).put<uint64_t>(off);
  w.pad(32);
  w.buf.append(512, '\0');
  expect_error(w.buf, "'a' appears twice");
}

TEST(GgufReader, EveryTruncationIsAnError) {
  const std::string image = build(all_tensors());
  ASSERT_TRUE(parse(image).ok());
  for (size_t n = 0; n < image.size(); ++n) {
    // The copy gives the sanitizers an exact-size buffer to catch reads past the end.
    const std::string prefix = image.substr(0, n);
    EXPECT_FALSE(parse(prefix).ok()) << "prefix of " << n << " bytes parsed";
  }
}

TEST(GgufReader, CorruptedBytesNeverCrash) {
  const std::string image = build(all_tensors());
  int errors = 0;
  for (size_t i = 0; i < image.size(); ++i) {
    for (uint8_t flip : {0x01, 0x80, 0xFF}) {
      std::string bad = image;
      bad[i] = static_cast<char>(bad[i] ^ flip);
      auto g = parse(bad);
      if (!g.ok()) {
        ++errors;
        continue;
      }
      for (const GgufTensorInfo& t : g->tensors()) g->dequantize(t);  // in bounds by construction
    }
  }
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace qs::io
