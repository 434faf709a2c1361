// audio: the chunk list of a RIFF/WAVE file, read for what libsndfile does not report: the
// format fields when it refuses the file (it says only "SF_INFO struct incomplete" for a 0 Hz
// header) and the data chunk's declared size, which it silently shortens to what the file
// holds.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace qs::audio {

// `n` bytes at `offset` of a file, fewer at its end.
using ReadAt = std::function<std::string(uint64_t offset, size_t n)>;

struct RiffWave {
  std::optional<int64_t> channels;     // from the "fmt " chunk
  std::optional<int64_t> sample_rate;  // from the "fmt " chunk
  std::optional<uint64_t> data_size;   // the "data" chunk's size field
  uint64_t data_offset = 0;            // where its bytes start
};

// nullopt when the file is no little-endian RIFF/WAVE (RIFX, RF64, W64 and the rest).
std::optional<RiffWave> read_riff_wave(const ReadAt& read_at, uint64_t file_size);

}  // namespace qs::audio
