// audio: the RIFF/WAVE chunk walk (see riff_header.h).
#include "audio/riff_header.h"

namespace qs::audio {
namespace {

uint64_t riff_le(const std::string& b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(b[at + i]);
  return v;
}

}  // namespace

std::optional<RiffWave> read_riff_wave(const ReadAt& read_at, uint64_t file_size) {
  const std::string head = read_at(0, 12);
  if (head.size() < 12 || head.compare(0, 4, "RIFF") != 0 || head.compare(8, 4, "WAVE") != 0) {
    return std::nullopt;
  }
  RiffWave wave;
  uint64_t pos = 12;
  // Past this many chunks before "data" the file is no WAV anyone wrote; libsndfile decides.
  for (int i = 0; i < 4096 && pos + 8 <= file_size; ++i) {
    const std::string header = read_at(pos, 8);
    if (header.size() < 8) break;
    const uint64_t size = riff_le(header, 4, 4);
    if (header.compare(0, 4, "fmt ") == 0) {
      // WAVEFORMAT: format tag (2 bytes), channels (2), samples per second (4), ...
      const std::string fmt = read_at(pos + 8, 8);
      if (fmt.size() == 8) {
        wave.channels = static_cast<int64_t>(riff_le(fmt, 2, 2));
        wave.sample_rate = static_cast<int64_t>(riff_le(fmt, 4, 4));
      }
    } else if (header.compare(0, 4, "data") == 0) {
      wave.data_size = size;
      wave.data_offset = pos + 8;
      break;
    }
    pos += 8 + size + (size & 1);  // chunks are padded to even sizes
  }
  return wave;
}

}  // namespace qs::audio
