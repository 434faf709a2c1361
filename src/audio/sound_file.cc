// audio: libsndfile behind read_sound_file / read_sound_bytes (see sound_file.h). Every
// message starts with the file's name.
#include "audio/sound_file.h"

#include <sndfile.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "audio/resample.h"
#include "audio/riff_header.h"

namespace qs::audio {
namespace {

// The bytes of an upload as libsndfile's virtual I/O sees them.
struct MemoryFile {
  std::string_view bytes;
  sf_count_t pos = 0;
};

sf_count_t memory_length(void* user) {
  return static_cast<sf_count_t>(static_cast<MemoryFile*>(user)->bytes.size());
}

sf_count_t memory_seek(sf_count_t offset, int whence, void* user) {
  auto* m = static_cast<MemoryFile*>(user);
  sf_count_t base = 0;
  if (whence == SEEK_CUR) base = m->pos;
  if (whence == SEEK_END) base = static_cast<sf_count_t>(m->bytes.size());
  sf_count_t target = 0;
  // Offsets come from header fields: a hostile one must not overflow or go below zero.
  if (__builtin_add_overflow(base, offset, &target) || target < 0) return -1;
  m->pos = target;
  return m->pos;
}

sf_count_t memory_read(void* dst, sf_count_t count, void* user) {
  auto* m = static_cast<MemoryFile*>(user);
  const auto size = static_cast<sf_count_t>(m->bytes.size());
  if (count <= 0 || m->pos >= size) return 0;
  const sf_count_t n = std::min(count, size - m->pos);
  std::memcpy(dst, m->bytes.data() + m->pos, static_cast<size_t>(n));
  m->pos += n;
  return n;
}

sf_count_t memory_write(const void*, sf_count_t, void*) {
  return 0;
}

sf_count_t memory_tell(void* user) {
  return static_cast<MemoryFile*>(user)->pos;
}

struct SndFileCloser {
  void operator()(SNDFILE* f) const { sf_close(f); }
};
using SndFilePtr = std::unique_ptr<SNDFILE, SndFileCloser>;

Status check_rate_and_channels(int64_t rate, int64_t channels, const std::string& name) {
  if (rate < kMinSampleRate || rate > kMaxSampleRate) {
    return invalid_argument(name + ": sample rate " + std::to_string(rate) + " Hz is outside [" +
                            std::to_string(kMinSampleRate) + ", " + std::to_string(kMaxSampleRate) +
                            "]");
  }
  if (channels < 1 || channels > kMaxChannels) {
    return invalid_argument(name + ": " + std::to_string(channels) + " channels, outside [1, " +
                            std::to_string(kMaxChannels) + "]");
  }
  return ok_status();
}

// libsndfile reads a WAV cut short in its data chunk as a shorter recording (it only logs the
// mismatch), so a truncated upload would be transcribed as if complete. Streaming writers put
// 0 or 0xFFFFFFFF in the size when the length is unknown; those pass.
Status check_wav_complete(const ReadAt& read_at, uint64_t file_size, const std::string& name) {
  const std::optional<RiffWave> wave = read_riff_wave(read_at, file_size);
  if (!wave || !wave->data_size) return ok_status();
  const uint64_t size = *wave->data_size;
  if (size == 0 || size == 0xFFFFFFFFu || wave->data_offset + size <= file_size) {
    return ok_status();
  }
  return data_loss(name + ": truncated WAV: its data chunk declares " + std::to_string(size) +
                   " bytes, the file holds " + std::to_string(file_size - wave->data_offset));
}

// libsndfile's reason for refusing a WAV whose header holds a 0 Hz rate or no channels is
// "SF_INFO struct incomplete"; the header itself says what is wrong.
Status open_error(const ReadAt& read_at, uint64_t file_size, const std::string& name) {
  // With no handle, libsndfile keeps the reason of the last failed open, process-wide: under
  // concurrent uploads it may be another's. The name and the checks below are this file's.
  const std::string reason = sf_strerror(nullptr);
  const std::optional<RiffWave> wave = read_riff_wave(read_at, file_size);
  if (wave && wave->sample_rate && wave->channels) {
    QS_RETURN_IF_ERROR(check_rate_and_channels(*wave->sample_rate, *wave->channels, name));
  }
  return invalid_argument(name + ": not a sound file libsndfile can read: " + reason);
}

Status check_options(const ReadOptions& o, const std::string& name) {
  if (!(o.max_seconds > 0) || !std::isfinite(o.max_seconds)) {
    return invalid_argument(name + ": the duration limit must be a positive number of seconds");
  }
  if (o.target_rate != kKeepRate &&
      (o.target_rate < kMinSampleRate || o.target_rate > kMaxSampleRate)) {
    return invalid_argument(name + ": target sample rate " + std::to_string(o.target_rate) +
                            " Hz is outside [" + std::to_string(kMinSampleRate) + ", " +
                            std::to_string(kMaxSampleRate) + "]");
  }
  return ok_status();
}

std::string seconds_string(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

Result<Sound> decode(SNDFILE* f, const SF_INFO& info, const std::string& name,
                     const ReadOptions& options, const ReadAt& read_at, uint64_t file_size) {
  QS_RETURN_IF_ERROR(check_rate_and_channels(info.samplerate, info.channels, name));
  const int64_t rate = info.samplerate;
  const double max_frames_f = std::floor(options.max_seconds * static_cast<double>(rate));
  const int64_t max_frames =
      max_frames_f >= 9.0e18 ? INT64_MAX : static_cast<int64_t>(max_frames_f);
  // SF_COUNT_MAX: the container does not say (a stream); the decode loop enforces the limit.
  const bool frames_known = info.frames >= 0 && info.frames != SF_COUNT_MAX;
  if (frames_known && info.frames > max_frames) {
    return out_of_range(name + ": lasts " +
                        seconds_string(static_cast<double>(info.frames) / rate) +
                        ", above the limit of " + seconds_string(options.max_seconds));
  }
  const int major = info.format & SF_FORMAT_TYPEMASK;
  if (major == SF_FORMAT_WAV || major == SF_FORMAT_WAVEX) {
    QS_RETURN_IF_ERROR(check_wav_complete(read_at, file_size, name));
  }

  const int channels = info.channels;
  constexpr sf_count_t kChunkFrames = 16384;
  std::vector<float> buffer(static_cast<size_t>(kChunkFrames * channels));
  Sound sound;
  sound.source_rate = rate;
  sound.source_channels = channels;
  if (frames_known) {
    sound.samples.reserve(static_cast<size_t>(std::min<int64_t>(info.frames, 1 << 24)));
  }
  int64_t total = 0;
  for (;;) {
    const sf_count_t n = sf_readf_float(f, buffer.data(), kChunkFrames);
    if (n <= 0) break;
    if (n > max_frames - total) {
      return out_of_range(name + ": lasts more than the limit of " +
                          seconds_string(options.max_seconds));
    }
    for (sf_count_t i = 0; i < n; ++i) {
      const float* frame = buffer.data() + i * channels;
      // A double sum cannot overflow on large float samples; for stereo it rounds exactly as
      // numpy's float32 mean (the references' downmix) does.
      double sum = 0.0;
      for (int c = 0; c < channels; ++c) sum += frame[c];
      const auto mean = static_cast<float>(sum / channels);
      if (!std::isfinite(mean)) {
        return data_loss(name + ": sample " + std::to_string(total + i) +
                         " is not a finite number");
      }
      // Only float formats reach past full scale; ffmpeg's s16 conversion (faster-whisper's
      // decoder) clips them the same way.
      sound.samples.push_back(std::clamp(mean, -1.0f, 1.0f));
    }
    total += n;
  }
  if (sf_error(f) != SF_ERR_NO_ERROR) {
    return data_loss(name + ": decoding failed after " + std::to_string(total) +
                     " frames: " + sf_strerror(f));
  }
  if (total == 0) return invalid_argument(name + ": holds no audio samples");
  // MP3 headers only estimate the length; every other container states it exactly.
  if (frames_known && major != SF_FORMAT_MPEG && total < info.frames) {
    return data_loss(name + ": truncated: the header declares " + std::to_string(info.frames) +
                     " frames, " + std::to_string(total) + " could be decoded");
  }
  sound.source_frames = total;
  sound.sample_rate = rate;
  if (options.target_rate != kKeepRate && options.target_rate != rate) {
    auto resampled = resample(sound.samples, rate, options.target_rate);
    if (!resampled.ok()) return resampled.status().with_context(name);
    sound.samples = std::move(resampled).value();
    // The filter rings past full scale next to clipped input; keep the promised range.
    for (float& s : sound.samples) s = std::clamp(s, -1.0f, 1.0f);
    sound.sample_rate = options.target_rate;
  }
  return sound;
}

}  // namespace

Result<Sound> read_sound_file(const std::string& path, const ReadOptions& options) {
  QS_RETURN_IF_ERROR(check_options(options, path));
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return not_found(path + ": no such sound file");
  }
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return io_error(path + ": " + ec.message());
  if (size == 0) return invalid_argument(path + ": the file is empty");
  SF_INFO info{};
  SndFilePtr f(sf_open(path.c_str(), SFM_READ, &info));
  std::ifstream in(path, std::ios::binary);
  const ReadAt read_at = [&in](uint64_t offset, size_t n) {
    std::string b(n, '\0');
    in.clear();
    in.seekg(static_cast<std::streamoff>(offset));
    in.read(b.data(), static_cast<std::streamsize>(n));
    b.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
    return b;
  };
  if (!f) return open_error(read_at, size, path);
  return decode(f.get(), info, path, options, read_at, size);
}

Result<Sound> read_sound_bytes(std::string_view bytes, const std::string& name,
                               const ReadOptions& options) {
  QS_RETURN_IF_ERROR(check_options(options, name));
  if (bytes.empty()) return invalid_argument(name + ": the file is empty");
  MemoryFile memory{bytes, 0};
  SF_VIRTUAL_IO io{memory_length, memory_seek, memory_read, memory_write, memory_tell};
  SF_INFO info{};
  SndFilePtr f(sf_open_virtual(&io, SFM_READ, &info, &memory));
  const ReadAt read_at = [bytes](uint64_t offset, size_t n) {
    if (offset >= bytes.size()) return std::string();
    return std::string(bytes.substr(static_cast<size_t>(offset), n));
  };
  if (!f) return open_error(read_at, bytes.size(), name);
  return decode(f.get(), info, name, options, read_at, bytes.size());
}

}  // namespace qs::audio
