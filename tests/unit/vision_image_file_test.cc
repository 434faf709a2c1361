// unit: vision/image_file.h on hostile input: empty, random bytes, text, every truncation of
// a JPEG, PNG and WebP, 30000x30000 headers of each format refused before decoding, 0-sized
// images, the caller's pixel limit, formats we do not read, missing files; plus the EXIF
// reader on malformed blocks. Every refusal is a Status naming the input, never a crash.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "vision/exif_orientation.h"
#include "vision/image_file.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using vision::read_image_bytes;

const fs::path kVisionFixtures = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/vision";

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string be(uint32_t v, int bytes) {
  std::string out;
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return out;
}

std::string le(uint32_t v, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return out;
}

// A baseline JPEG's markers up to its first scan: SOI, an SOF0 of `width` x `height` with
// three components and an SOS, then the end of the file (no tables, no data): all that
// jpeg_read_header reads.
std::string jpeg_header(uint32_t width, uint32_t height) {
  const std::string sof = std::string("\x08", 1) + be(height, 2) + be(width, 2) + "\x03" +
                          std::string("\x01\x11\x00\x02\x11\x00\x03\x11\x00", 9);
  const std::string sos = std::string("\x03\x01\x00\x02\x11\x03\x11\x00\x3f\x00", 10);
  return std::string("\xff\xd8\xff\xc0", 4) + be(static_cast<uint32_t>(sof.size() + 2), 2) + sof +
         "\xff\xda" + be(static_cast<uint32_t>(sos.size() + 2), 2) + sos;
}

// A WebP whose VP8X chunk declares a `width` x `height` canvas and nothing else.
std::string webp_vp8x(uint32_t width, uint32_t height) {
  const std::string vp8x =
      "VP8X" + le(10, 4) + std::string(4, '\0') + le(width - 1, 3) + le(height - 1, 3);
  return "RIFF" + le(static_cast<uint32_t>(4 + vp8x.size()), 4) + "WEBP" + vp8x;
}

void expect_refused(std::string_view bytes, const std::string& what,
                    const vision::ImageReadOptions& options = {}) {
  auto image = read_image_bytes(bytes, "upload.bin", options);
  ASSERT_FALSE(image.ok()) << what;
  EXPECT_TRUE(has(image.status().message(), "upload.bin"))
      << what << ": " << image.status().message();
}

TEST(VisionImageFile, EmptyRandomAndTextAreRefused) {
  expect_refused("", "empty");
  expect_refused("hello, this is not an image", "text");
  std::mt19937 rng(7);
  for (int i = 0; i < 50; ++i) {
    std::string noise(1 + rng() % 300, '\0');
    for (char& c : noise) c = static_cast<char>(rng());
    expect_refused(noise, "noise");
  }
  auto empty = read_image_bytes("", "upload.bin");
  EXPECT_TRUE(has(empty.status().message(), "empty"));
}

TEST(VisionImageFile, EveryTruncationIsAnError) {
  for (const char* name : {"orient6_40x24.jpg", "progressive_90x60.jpg", "gradient_64x48.png",
                           "lossless_48x40.webp", "lossy_alpha_64x48.webp"}) {
    const std::string bytes = file_bytes(kVisionFixtures / name);
    ASSERT_TRUE(read_image_bytes(bytes, name).ok()) << name;
    // A JPEG's last two bytes are its EOI marker, which libjpeg does without; a PNG's last 12
    // its IEND chunk, which Pillow does without too. Every shorter cut must fail.
    const size_t keep = has(name, ".jpg") ? 2 : has(name, ".png") ? 12 : 0;
    for (size_t cut = 0; cut + keep < bytes.size(); ++cut) {
      expect_refused(std::string_view(bytes).substr(0, cut),
                     std::string(name) + " cut at " + std::to_string(cut));
    }
  }
}

TEST(VisionImageFile, HugeHeadersAreRefusedBeforeDecoding) {
  const std::string png = file_bytes(kVisionFixtures / "huge_header_30000x30000.png");
  for (const std::string& bytes : {png, jpeg_header(30000, 30000), webp_vp8x(30000, 30000)}) {
    auto image = read_image_bytes(bytes, "upload.bin");
    ASSERT_FALSE(image.ok());
    EXPECT_EQ(image.status().code(), StatusCode::kOutOfRange) << image.status().message();
    EXPECT_TRUE(has(image.status().message(), "30000x30000")) << image.status().message();
  }
}

TEST(VisionImageFile, TheCallersPixelLimitHolds) {
  const std::string bytes = file_bytes(kVisionFixtures / "gradient_64x48.png");
  EXPECT_TRUE(read_image_bytes(bytes, "a", {.max_pixels = 64 * 48}).ok());
  expect_refused(bytes, "limit", {.max_pixels = 64 * 48 - 1});
  expect_refused(bytes, "no limit", {.max_pixels = 0});
}

TEST(VisionImageFile, ZeroSizedImagesAreRefused) {
  expect_refused(jpeg_header(0, 10), "JPEG 0 wide");
  expect_refused(jpeg_header(10, 0), "JPEG 0 high");
  // PNG: the fixture's IHDR with its width zeroed (libpng checks before our size check).
  std::string png = file_bytes(kVisionFixtures / "gradient_64x48.png");
  png.replace(16, 4, std::string(4, '\0'));
  expect_refused(png, "PNG 0 wide");
}

TEST(VisionImageFile, OtherFormatsAreNamed) {
  auto gif = read_image_bytes("GIF89a\x01\x00\x01\x00", "upload.bin");
  ASSERT_FALSE(gif.ok());
  EXPECT_EQ(gif.status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(has(gif.status().message(), "GIF"));
  auto bmp = read_image_bytes("BM\x36\x00\x00\x00", "upload.bin");
  EXPECT_TRUE(has(bmp.status().message(), "BMP"));
}

TEST(VisionImageFile, MissingFilesAndDirectoriesAreNotFound) {
  auto missing = vision::read_image_file("/nonexistent/x.png");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(vision::read_image_file(kVisionFixtures.string()).ok());
}

TEST(VisionImageFile, FromPathAndFromBytesAgree) {
  for (const char* name : {"photo_300x200.jpg", "alpha_40x30.png", "lossy_alpha_64x48.webp"}) {
    auto from_path = vision::read_image_file((kVisionFixtures / name).string());
    auto from_bytes = read_image_bytes(file_bytes(kVisionFixtures / name), name);
    ASSERT_TRUE(from_path.ok() && from_bytes.ok()) << name;
    EXPECT_EQ(from_path->pixels, from_bytes->pixels) << name;
    EXPECT_EQ(from_path->format, from_bytes->format) << name;
  }
}

// An EXIF block with one IFD entry: tag, type, count, value.
std::string exif_block(bool little, uint16_t tag, uint16_t type, uint32_t count, uint32_t value) {
  const auto num = [little](uint32_t v, int n) { return little ? le(v, n) : be(v, n); };
  std::string value_field = type == 3 ? num(value, 2) + std::string(2, '\0') : num(value, 4);
  return std::string("Exif\0\0", 6) + (little ? "II" : "MM") + num(42, 2) + num(8, 4) + num(1, 2) +
         num(tag, 2) + num(type, 2) + num(count, 4) + value_field + num(0, 4);
}

TEST(VisionExif, OrientationIsReadOrDefaultsToOne) {
  EXPECT_EQ(vision::exif_orientation(exif_block(true, 0x0112, 3, 1, 6)), 6);
  EXPECT_EQ(vision::exif_orientation(exif_block(false, 0x0112, 3, 1, 8)), 8);
  EXPECT_EQ(vision::exif_orientation(exif_block(true, 0x0112, 4, 1, 3)), 3);
  EXPECT_EQ(vision::exif_orientation(exif_block(true, 0x0112, 3, 1, 9)), 1);  // out of range
  EXPECT_EQ(vision::exif_orientation(exif_block(true, 0x0112, 2, 1, 6)), 1);  // ASCII
  EXPECT_EQ(vision::exif_orientation(exif_block(true, 0x010f, 3, 1, 6)), 1);  // another tag
  EXPECT_EQ(vision::exif_orientation(exif_block(true, 0x0112, 3, 1, 6).substr(6)), 6);
  const std::string whole = exif_block(true, 0x0112, 3, 1, 6);
  for (size_t cut = 0; cut < whole.size() - 4; ++cut) {
    const int o = vision::exif_orientation(whole.substr(0, cut));
    EXPECT_TRUE(o == 1 || o == 6) << cut;
  }
  std::string far = whole;
  far.replace(10, 4, le(0x7fffffff, 4));  // the IFD offset points past the end
  EXPECT_EQ(vision::exif_orientation(far), 1);
}

TEST(VisionExif, OrientationsTurnPixelsAsPillowDoes) {
  // 3x2 image, one channel: values are their own indices.
  const std::vector<uint8_t> base = {0, 1, 2, 3, 4, 5};
  const std::vector<std::vector<uint8_t>> expected = {
      {2, 1, 0, 5, 4, 3},  // 2: mirrored
      {5, 4, 3, 2, 1, 0},  // 3: 180 degrees
      {3, 4, 5, 0, 1, 2},  // 4: flipped
      {0, 3, 1, 4, 2, 5},  // 5: transposed
      {3, 0, 4, 1, 5, 2},  // 6: 90 degrees clockwise
      {5, 2, 4, 1, 3, 0},  // 7: transversed
      {2, 5, 1, 4, 0, 3},  // 8: 90 degrees counter-clockwise
  };
  for (int k = 2; k <= 8; ++k) {
    std::vector<uint8_t> px = base;
    int64_t w = 3, h = 2;
    vision::apply_orientation(k, 1, w, h, px);
    EXPECT_EQ(px, expected[k - 2]) << k;
    EXPECT_EQ(w, k >= 5 ? 2 : 3) << k;
  }
}

}  // namespace
}  // namespace qs
