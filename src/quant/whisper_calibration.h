// quant: the calibration of OPT-RTN on Whisper (pipeline_whisper.cc): audio files transcribed
// by the full-precision model while an observer on every block linear sums the squares of its
// inputs, per input column (the imatrix of autoround.md §1.5, which opt_rtn() weights by).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace qs::quant {

// --dataset for a Whisper model: a directory (its regular files not starting with '.', sorted
// by name) or a text file listing audio paths, one a line (relative ones from the list's folder;
// blank lines and lines starting with '#' skipped). The first `nsamples` files, in that order.
// Errors: no dataset (OPT-RTN needs audio), a missing path, a binary file given as the list,
// no files.
Result<std::vector<std::string>> whisper_calibration_files(const std::string& dataset,
                                                           int64_t nsamples);

struct WhisperImatrix {
  // module ("model.decoder.layers.0.fc1") -> [in_features]: the sum over every row the linear
  // read of x^2, in f64.
  std::map<std::string, std::vector<double>> sums;
  std::map<std::string, int64_t> rows;  // rows each module read
  int64_t n_clips = 0;
  double seconds = 0;  // of audio
};

// Transcribes each file (any format audio::read_sound_file reads, resampled to 16 kHz) with
// the model in `model_dir` through audio::WhisperTranscriber::transcribe, greedy (temperature
// 0, no fallback) and otherwise as `quantserve transcribe` does: every 30 s window's encoder
// rows, the cross-attention k/v projections of its output, and the decoder's rows of the
// prompt (previous text included) and of each greedy step reach the observer. A file that is
// not audio is an error naming it.
Result<WhisperImatrix> whisper_imatrix(const std::string& model_dir,
                                       const std::vector<std::string>& files, int threads);

}  // namespace qs::quant
