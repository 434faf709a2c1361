// audio: the log-mel spectrogram (see log_mel.h). All arithmetic is f64 until the output:
// transformers' numpy path runs its FFT in f64 too, and f64 keeps the error against both
// references far inside 1e-4 even in the quietest bins that survive the floor.
#include "audio/log_mel.h"

#include <fftw3.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <numbers>

namespace qs::audio {
namespace {

// Both references fix the top of the bank at 8 kHz whatever the sampling rate.
constexpr double kWhisperMaxHz = 8000.0;

// Slaney's mel scale as librosa writes it: 3 mels per 200 Hz up to 1 kHz, then 27 mels per
// factor of 6.4 in frequency.
constexpr double kMelLinearHzPerMel = 200.0 / 3.0;
constexpr double kMelLogStartHz = 1000.0;
constexpr double kMelLogStartMel = kMelLogStartHz / kMelLinearHzPerMel;

double mel_log_step() {
  return std::log(6.4) / 27.0;
}

double hz_to_mel(double hz) {
  if (hz >= kMelLogStartHz) return kMelLogStartMel + std::log(hz / kMelLogStartHz) / mel_log_step();
  return hz / kMelLinearHzPerMel;
}

double mel_to_hz(double mel) {
  if (mel >= kMelLogStartMel)
    return kMelLogStartHz * std::exp(mel_log_step() * (mel - kMelLogStartMel));
  return kMelLinearHzPerMel * mel;
}

// FFTW documents only its execute functions as thread-safe, so buffers come from the C
// library rather than fftw_malloc, aligned to 64 bytes: a multiple of every SIMD width, so
// the plans' arrays and each call's have the same alignment, as new-array execution needs.
struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

template <typename T>
std::unique_ptr<T[], AlignedFree> fft_buffer(int64_t n) {
  const size_t bytes = (static_cast<size_t>(n) * sizeof(T) + 63) / 64 * 64;
  T* p = static_cast<T*>(std::aligned_alloc(64, bytes));
  if (p == nullptr) throw std::bad_alloc();  // out of memory, not a bug of ours
  return std::unique_ptr<T[], AlignedFree>(p);
}

// numpy.fft.rfft plans, one per FFT size, made once: FFTW's planner is not thread-safe, its
// new-array execute functions are. Plans live as long as the process.
struct PlanDeleter {
  void operator()(fftw_plan_s* p) const { fftw_destroy_plan(p); }
};

fftw_plan r2c_plan(int64_t n_fft) {
  static std::mutex mutex;
  static std::map<int64_t, std::unique_ptr<fftw_plan_s, PlanDeleter>> plans;
  std::lock_guard<std::mutex> lock(mutex);
  auto& plan = plans[n_fft];
  if (!plan) {
    // FFTW_ESTIMATE plans without touching the arrays; these only fix the alignment that
    // every call's buffers share.
    const auto in = fft_buffer<double>(n_fft);
    const auto out = fft_buffer<fftw_complex>(n_fft / 2 + 1);
    plan.reset(fftw_plan_dft_r2c_1d(static_cast<int>(n_fft), in.get(), out.get(), FFTW_ESTIMATE));
  }
  QS_CHECK_MSG(plan != nullptr, "FFTW could not plan a real FFT of this size");
  return plan.get();
}

// numpy's pad(mode="reflect") index, which mirrors again and again when the padding is longer
// than the signal.
int64_t reflect_index(int64_t i, int64_t n) {
  if (n == 1) return 0;
  const int64_t period = 2 * (n - 1);
  int64_t j = i % period;
  if (j < 0) j += period;
  return j >= n ? period - j : j;
}

}  // namespace

MelFilterBank mel_filter_bank(int64_t sample_rate, int64_t n_fft, int64_t n_mels, double f_min,
                              double f_max) {
  MelFilterBank bank;
  bank.n_mels = n_mels;
  bank.n_bins = n_fft / 2 + 1;
  // numpy.linspace: start + i * step, the last point set to stop exactly.
  const int64_t n_points = n_mels + 2;
  const double mel_lo = hz_to_mel(f_min), mel_hi = hz_to_mel(f_max);
  const double step = (mel_hi - mel_lo) / static_cast<double>(n_points - 1);
  std::vector<double> edge_hz(static_cast<size_t>(n_points));
  for (int64_t i = 0; i < n_points; ++i) {
    const double mel = i == n_points - 1 ? mel_hi : mel_lo + static_cast<double>(i) * step;
    edge_hz[i] = mel_to_hz(mel);
  }
  bank.weights.assign(static_cast<size_t>(n_mels * bank.n_bins), 0.0);
  bank.first.assign(static_cast<size_t>(n_mels), 0);
  bank.end.assign(static_cast<size_t>(n_mels), 0);
  for (int64_t m = 0; m < n_mels; ++m) {
    const double lo = edge_hz[m], centre = edge_hz[m + 1], hi = edge_hz[m + 2];
    const double area_norm = 2.0 / (hi - lo);
    double* row = bank.weights.data() + m * bank.n_bins;
    int64_t first = bank.n_bins, end = 0;
    for (int64_t k = 0; k < bank.n_bins; ++k) {
      const double hz =
          static_cast<double>(k) * static_cast<double>(sample_rate) / static_cast<double>(n_fft);
      const double rising = (hz - lo) / (centre - lo);
      const double falling = (hi - hz) / (hi - centre);
      const double w = std::max(0.0, std::min(rising, falling));
      if (w > 0.0) {
        row[k] = w * area_norm;
        first = std::min(first, k);
        end = k + 1;
      }
    }
    bank.first[m] = std::min(first, end);
    bank.end[m] = end;
  }
  return bank;
}

Result<LogMel> log_mel_spectrogram(std::span<const float> samples, const LogMelConfig& config) {
  QS_RETURN_IF_ERROR(validate_log_mel_config(config, "log-mel config"));
  const int64_t n = static_cast<int64_t>(samples.size());
  const int64_t n_fft = config.n_fft, hop = config.hop_length, pad = n_fft / 2;
  if (n == 0) return invalid_argument("log-mel spectrogram: no samples");
  const int64_t padded = n + 2 * pad;
  if (padded < n_fft) {
    return invalid_argument("log-mel spectrogram: " + std::to_string(n) +
                            " samples are fewer than one " + std::to_string(n_fft) +
                            "-sample window");
  }
  // Both references compute one more frame than they keep.
  const int64_t n_frames = (padded - n_fft) / hop;
  if (n_frames == 0) return invalid_argument("log-mel spectrogram: too few samples for a frame");
  const int64_t n_bins = n_fft / 2 + 1;
  const MelFilterBank bank =
      mel_filter_bank(config.sample_rate, n_fft, config.n_mels, 0.0, kWhisperMaxHz);

  // numpy.hanning(n_fft + 1)[:-1]: the periodic window.
  std::vector<double> window(static_cast<size_t>(n_fft));
  for (int64_t i = 0; i < n_fft; ++i) {
    window[i] = 0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * static_cast<double>(i) /
                                     static_cast<double>(n_fft));
  }
  const fftw_plan plan = r2c_plan(n_fft);
  const auto frame = fft_buffer<double>(n_fft);
  const auto spectrum = fft_buffer<fftw_complex>(n_bins);
  std::vector<double> power(static_cast<size_t>(n_bins));
  std::vector<double> log_mel(static_cast<size_t>(config.n_mels * n_frames));
  double max_log = -INFINITY;
  for (int64_t t = 0; t < n_frames; ++t) {
    const int64_t start = t * hop - pad;
    for (int64_t i = 0; i < n_fft; ++i) {
      const int64_t s = start + i;
      const double x = s >= 0 && s < n ? samples[s] : samples[reflect_index(s, n)];
      frame[i] = x * window[i];
    }
    fftw_execute_dft_r2c(plan, frame.get(), spectrum.get());
    for (int64_t k = 0; k < n_bins; ++k) {
      const double re = spectrum[k][0], im = spectrum[k][1];
      power[k] = re * re + im * im;
    }
    for (int64_t m = 0; m < config.n_mels; ++m) {
      const double* w = bank.weights.data() + m * n_bins;
      double energy = 0.0;
      for (int64_t k = bank.first[m]; k < bank.end[m]; ++k) energy += w[k] * power[k];
      const double v = std::log10(std::max(energy, 1e-10));
      log_mel[m * n_frames + t] = v;
      max_log = std::max(max_log, v);
    }
  }
  LogMel out;
  out.n_mels = config.n_mels;
  out.n_frames = n_frames;
  out.values.resize(log_mel.size());
  // Whisper's dynamic range: 80 dB below the loudest bin, then roughly into [-1, 1].
  const double floor = max_log - 8.0;
  for (size_t i = 0; i < log_mel.size(); ++i) {
    out.values[i] = static_cast<float>((std::max(log_mel[i], floor) + 4.0) / 4.0);
  }
  return out;
}

Result<LogMel> whisper_features_hf(std::span<const float> samples, const LogMelConfig& config) {
  QS_RETURN_IF_ERROR(validate_log_mel_config(config, "log-mel config"));
  std::vector<float> clip(static_cast<size_t>(config.n_samples), 0.0f);
  std::copy_n(samples.begin(), std::min<size_t>(samples.size(), clip.size()), clip.begin());
  return log_mel_spectrogram(clip, config);
}

Result<LogMel> whisper_features_masked(std::span<const float> samples, const LogMelConfig& config) {
  QS_RETURN_IF_ERROR(validate_log_mel_config(config, "log-mel config"));
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(samples.size()), config.n_samples);
  if (n == 0) return invalid_argument("whisper features: the clip has no samples");
  const int64_t frames = (n + config.hop_length - 1) / config.hop_length;
  // Far enough past the clip that the kept frames and the reflection at the end see zeros
  // only; the padded length itself where the clip nearly fills it.
  const int64_t length = std::min(config.n_samples, frames * config.hop_length + config.n_fft);
  std::vector<float> clip(static_cast<size_t>(length), 0.0f);
  std::copy_n(samples.begin(), n, clip.begin());
  QS_ASSIGN_OR_RETURN(LogMel all, log_mel_spectrogram(clip, config));
  if (all.n_frames < frames) return internal_error("whisper features: too few frames computed");
  LogMel out;
  out.n_mels = all.n_mels;
  out.n_frames = frames;
  out.values.resize(static_cast<size_t>(out.n_mels * frames));
  for (int64_t m = 0; m < out.n_mels; ++m) {
    std::copy_n(all.values.begin() + m * all.n_frames, frames, out.values.begin() + m * frames);
  }
  return out;
}

Result<LogMel> whisper_features_whole(std::span<const float> samples, int64_t padding,
                                      const LogMelConfig& config) {
  if (padding < 0 || padding > config.n_samples) {
    return invalid_argument("whisper features: padding " + std::to_string(padding) +
                            " is outside [0, " + std::to_string(config.n_samples) + "]");
  }
  std::vector<float> padded(samples.size() + static_cast<size_t>(padding), 0.0f);
  std::copy(samples.begin(), samples.end(), padded.begin());
  return log_mel_spectrogram(padded, config);
}

}  // namespace qs::audio
