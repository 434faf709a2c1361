// Kernel lab: the multimodal towers' encode time on a checkpoint directory (a `make-model
// --like qwen2.5-vl-3b` or `--like qwen2.5-omni-7b` one): an image through Qwen2.5-VL's vision
// tower, decoded and processed as `generate --image` does (the processor timed apart from the
// tower), and a clip of --audio-seconds through Qwen2.5-Omni's audio tower (its log-mel
// features timed apart). The towers are 16-bit in bf16 and W4A16 checkpoints alike, so this
// times what the decoder's scheme does not change. Prints one JSON object for
// scripts/bench_vl.sh; the median of --reps timed runs after one warm-up.
//   build/bench/vl_encode_bench --model DIR [--image FILE] [--audio-seconds 10] [--threads 2]
//                               [--reps 3]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "audio/log_mel.h"
#include "audio/log_mel_config.h"
#include "audio/qwen2_5_omni_audio.h"
#include "core/json.h"
#include "core/mmap_file.h"
#include "core/thread_pool.h"
#include "vision/image_prompt.h"
#include "vision/qwen2_5_vl_vision.h"

namespace {

using namespace qs;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Runs `fn` once to warm up (page faults of the mapped weights, the pool's first wake-up),
// then `reps` times; each run's seconds.
template <typename Fn>
Result<std::vector<double>> timed(int reps, Fn fn) {
  QS_RETURN_IF_ERROR(fn());
  std::vector<double> s;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    QS_RETURN_IF_ERROR(fn());
    s.push_back(seconds_since(t0));
  }
  return s;
}

Result<nlohmann::json> bench_image(const std::string& dir, const std::string& path, int reps,
                                   ThreadPool& pool) {
  QS_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  QS_ASSIGN_OR_RETURN(vision::Qwen2VLImageConfig processor,
                      vision::load_qwen2_vl_image_config(dir));
  vision::PromptImage image;
  QS_ASSIGN_OR_RETURN(std::vector<double> pre, timed(reps, [&]() -> Status {
                        QS_ASSIGN_OR_RETURN(image,
                                            vision::prepare_prompt_image(bytes, path, processor));
                        return ok_status();
                      }));
  QS_ASSIGN_OR_RETURN(vision::Qwen25VisionTower tower, vision::Qwen25VisionTower::load(dir));
  std::vector<float> out;
  const models::VisionGrid grid = image.grid;
  QS_ASSIGN_OR_RETURN(std::vector<double> enc, timed(reps, [&]() -> Status {
                        return tower.forward(image.pixels->data(), {&grid, 1}, &out, pool);
                      }));
  return nlohmann::json{{"file", path},
                        {"width", image.width},
                        {"height", image.height},
                        {"grid", {grid.t, grid.h, grid.w}},
                        {"patches", grid.t * grid.h * grid.w},
                        {"tokens", image.n_tokens},
                        {"preprocess_s", median(pre)},
                        {"encode_s", median(enc)},
                        {"encode_samples_s", enc}};
}

// A clip with the spectrum of speech-like sound: a rising tone under noise (the tower's time
// does not depend on the values, only the frame count does).
std::vector<float> synthetic_clip(double seconds, int64_t rate) {
  const int64_t n = static_cast<int64_t>(seconds * static_cast<double>(rate));
  std::vector<float> x(static_cast<size_t>(n));
  uint32_t state = 12345;
  for (int64_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) / static_cast<double>(rate);
    state = state * 1664525u + 1013904223u;
    const float noise = (static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * 0.05f;
    x[i] = 0.3f * static_cast<float>(std::sin(2 * M_PI * (200 + 40 * t) * t)) + noise;
  }
  return x;
}

Result<nlohmann::json> bench_audio(const std::string& dir, double seconds, int reps,
                                   ThreadPool& pool) {
  QS_ASSIGN_OR_RETURN(audio::LogMelConfig mel_config, audio::load_log_mel_config(dir));
  const std::vector<float> clip = synthetic_clip(seconds, mel_config.sample_rate);
  audio::LogMel mel;
  QS_ASSIGN_OR_RETURN(std::vector<double> feat, timed(reps, [&]() -> Status {
                        QS_ASSIGN_OR_RETURN(mel, audio::log_mel_spectrogram(clip, mel_config));
                        return ok_status();
                      }));
  // Qwen2.5-Omni's processor keeps ceil(samples / hop) frames (its attention mask).
  const int64_t hop = mel_config.hop_length;
  const int64_t frames =
      std::min<int64_t>(mel.n_frames, (static_cast<int64_t>(clip.size()) + hop - 1) / hop);
  std::vector<float> features(static_cast<size_t>(mel.n_mels * frames));
  for (int64_t m = 0; m < mel.n_mels; ++m) {
    std::copy_n(mel.values.data() + m * mel.n_frames, frames, features.data() + m * frames);
  }
  QS_ASSIGN_OR_RETURN(audio::Qwen25OmniAudioTower tower, audio::Qwen25OmniAudioTower::load(dir));
  if (tower.n_mels() != mel.n_mels) {
    return invalid_argument(dir + ": the audio tower takes " + std::to_string(tower.n_mels()) +
                            " mel bins, preprocessor_config.json gives " +
                            std::to_string(mel.n_mels));
  }
  std::vector<float> out;
  QS_ASSIGN_OR_RETURN(std::vector<double> enc, timed(reps, [&]() -> Status {
                        return tower.encode(features.data(), frames, &out, pool);
                      }));
  return nlohmann::json{
      {"seconds", seconds},         {"frames", frames},        {"tokens", tower.tokens(frames)},
      {"features_s", median(feat)}, {"encode_s", median(enc)}, {"encode_samples_s", enc}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, image;
  double audio_seconds = 0;
  int threads = 2, reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--model") {
      dir = v;
    } else if (a == "--image") {
      image = v;
    } else if (a == "--audio-seconds") {
      audio_seconds = std::atof(v.c_str());
    } else if (a == "--threads") {
      threads = std::atoi(v.c_str());
    } else if (a == "--reps") {
      reps = std::atoi(v.c_str());
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (dir.empty() || threads < 1 || reps < 1 || audio_seconds < 0 || audio_seconds > 3600 ||
      (image.empty() && audio_seconds == 0)) {
    std::fprintf(stderr,
                 "usage: vl_encode_bench --model DIR [--image FILE] [--audio-seconds S] "
                 "[--threads N] [--reps N] (an image, a clip or both)\n");
    return 2;
  }
  ThreadPool pool(threads);
  nlohmann::json result = {{"model", dir}, {"threads", threads}, {"reps", reps}};
  int rc = 0;
  // A tower that cannot run here is reported in the JSON, so one run still gives the other.
  if (!image.empty()) {
    auto r = bench_image(dir, image, reps, pool);
    result["image"] = r.ok() ? *r : nlohmann::json{{"error", r.status().to_string()}};
    if (!r.ok()) rc = 1;
  }
  if (audio_seconds > 0) {
    auto r = bench_audio(dir, audio_seconds, reps, pool);
    result["audio"] = r.ok() ? *r : nlohmann::json{{"error", r.status().to_string()}};
    if (!r.ok()) rc = 1;
  }
  std::printf("%s\n", result.dump().c_str());
  return rc;
}
