// quant: OPT-RTN's audio calibration for Whisper (whisper_calibration.h).
#include "quant/whisper_calibration.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "audio/sound_file.h"
#include "audio/transcribe.h"
#include "core/thread_pool.h"
#include "quant/opt_rtn.h"

namespace qs::quant {

namespace fs = std::filesystem;

Result<std::vector<std::string>> whisper_calibration_files(const std::string& dataset,
                                                           int64_t nsamples) {
  // The committed espeak-ng clips are test data and far too few to stand for real speech, so
  // there is no default set: the user names the audio.
  if (dataset.empty()) {
    return invalid_argument(
        "OPT-RTN on Whisper needs --dataset with audio files: a directory of them or a text "
        "file listing their paths (any format `transcribe` reads); or pass --disable_opt_rtn "
        "for RTN");
  }
  std::error_code ec;
  std::vector<std::string> files;
  if (fs::is_directory(dataset, ec)) {
    for (const auto& e : fs::directory_iterator(dataset, ec)) {
      const std::string name = e.path().filename().string();
      if (e.is_regular_file() && !name.starts_with(".")) files.push_back(e.path().string());
    }
    if (ec) return io_error("cannot list " + dataset + ": " + ec.message());
    std::sort(files.begin(), files.end());
  } else if (fs::is_regular_file(dataset, ec)) {
    std::ifstream in(dataset, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) return io_error("cannot read " + dataset);
    const std::string body = text.str();
    // An audio file given as the dataset would read as garbage paths: say what it is instead.
    if (body.find('\0') != std::string::npos) {
      return invalid_argument("--dataset " + dataset +
                              " is a binary file; for a Whisper model it is a directory of audio "
                              "files or a text file listing their paths, one a line");
    }
    const fs::path base = fs::path(dataset).parent_path();
    std::istringstream lines(body);
    std::string line;
    while (std::getline(lines, line)) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (line.empty() || line.front() == '#') continue;
      const fs::path p(line);
      files.push_back(p.is_absolute() ? line : (base / p).string());
    }
  } else {
    return invalid_argument("--dataset " + dataset + ": no such file or directory");
  }
  if (files.empty()) return invalid_argument("--dataset " + dataset + ": no audio files in it");
  if (nsamples > 0 && static_cast<int64_t>(files.size()) > nsamples) files.resize(nsamples);
  return files;
}

Result<WhisperImatrix> whisper_imatrix(const std::string& model_dir,
                                       const std::vector<std::string>& files, int threads) {
  ThreadPool pool(std::max(1, threads));
  WhisperImatrix out;
  // Called between the model's ops, on the thread that drives it, so the pool is free here.
  auto observer = [&](const std::string& module, const float* x, int64_t m, int64_t k) {
    std::vector<double>& sums = out.sums[module];
    if (sums.empty()) sums.assign(k, 0.0);
    add_squares(x, m, k, nullptr, sums.data(), &pool);
    out.rows[module] += m;
  };
  QS_ASSIGN_OR_RETURN(audio::WhisperTranscriber whisper,
                      audio::WhisperTranscriber::load(model_dir, observer));
  audio::TranscribeOptions options = whisper.default_options();
  // Greedy only: the fallback's sampled best-of would weight a hard clip's rows five times.
  options.decode.temperatures = {0.0f};
  audio::ReadOptions read;
  read.target_rate = whisper.mel_config().sample_rate;
  for (const std::string& file : files) {
    auto sound = audio::read_sound_file(file, read);
    if (!sound.ok()) {
      // read_sound_file's message names the file.
      return invalid_argument("calibration audio: " + sound.status().message());
    }
    QS_RETURN_IF_ERROR(whisper.transcribe(sound->samples, options, pool).status());
    out.seconds += static_cast<double>(sound->samples.size()) / read.target_rate;
    ++out.n_clips;
  }
  return out;
}

}  // namespace qs::quant
