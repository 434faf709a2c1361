// golden: OPT-RTN on the tiny random Whisper (int4 g32 sym, as auto_round), calibrated on the
// fixture clips. The imatrix is the plain sum of squares of the rows each block linear reads
// while the full-precision model transcribes them (an observer that leaves the transcript as it
// was); every written linear is opt_rtn() of its weight under that imatrix, which moves scales
// away from RTN's on some of them; the output loads and transcribes; a missing dataset, a
// non-audio file and a binary file given as the list are refused with the reason.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "audio/sound_file.h"
#include "audio/transcribe.h"
#include "formats/layouts.h"
#include "formats/rtn.h"
#include "io/checkpoint.h"
#include "io/quant_config.h"
#include "quant/opt_rtn.h"
#include "quant/whisper_calibration.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;
using testing::slurp;

const std::string kModel =
    std::string(QS_SOURCE_DIR) + "/tests/golden/fixtures/whisper/tiny_random";
const std::string kAudio = std::string(QS_SOURCE_DIR) + "/tests/golden/fixtures/audio";
const std::string kFlags = " --iters 0 --bits 4 --group_size 32 --threads 2";

class WhisperOptRtn : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("qs_whisper_opt_rtn_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "audio");
    // Three formats, two rates, one stereo: the calibration reads what `transcribe` reads.
    for (const char* f : {"fox_16k.wav", "fox_22050_stereo.flac", "hello_16k.ogg"}) {
      fs::copy_file(kAudio + "/" + f, dir_ / "audio" / f);
    }
    calib_ = (dir_ / "audio").string();
    quantized_ = (dir_ / "opt").string();
    auto r = run_cli("quantize --model " + kModel + " --output_dir " + quantized_ + kFlags +
                     " --dataset " + calib_);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    summary_ = r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::vector<std::string> files() {
    auto f = quant::whisper_calibration_files(calib_, 128);
    EXPECT_TRUE(f.ok()) << f.status().to_string();
    return *f;
  }

  static fs::path dir_;
  static std::string calib_, quantized_, summary_;
};
fs::path WhisperOptRtn::dir_;
std::string WhisperOptRtn::calib_, WhisperOptRtn::quantized_, WhisperOptRtn::summary_;

TEST_F(WhisperOptRtn, ImatrixIsTheSumOfSquaresOfTheObservedRows) {
  // Every row of three linears (an encoder one, a decoder self-attention one, a cross-attention
  // projection of the encoder output) summed here directly, in the order they came.
  const std::vector<std::string> watched = {"model.encoder.layers.1.fc2",
                                            "model.decoder.layers.0.self_attn.q_proj",
                                            "model.decoder.layers.1.encoder_attn.v_proj"};
  std::map<std::string, std::vector<double>> direct;
  std::map<std::string, int64_t> rows;
  auto observer = [&](const std::string& module, const float* x, int64_t m, int64_t k) {
    if (std::find(watched.begin(), watched.end(), module) == watched.end()) return;
    std::vector<double>& s = direct[module];
    s.resize(k, 0.0);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < k; ++j) s[j] += static_cast<double>(x[r * k + j]) * x[r * k + j];
    rows[module] += m;
  };
  auto plain = audio::WhisperTranscriber::load(kModel);
  auto observed = audio::WhisperTranscriber::load(kModel, observer);
  ASSERT_TRUE(plain.ok() && observed.ok());
  audio::TranscribeOptions o = plain->default_options();
  o.decode.temperatures = {0.0f};
  ThreadPool pool(2);
  for (const std::string& f : files()) {
    auto sound = audio::read_sound_file(f);
    ASSERT_TRUE(sound.ok()) << f;
    auto a = plain->transcribe(sound->samples, o, pool);
    auto b = observed->transcribe(sound->samples, o, pool);
    ASSERT_TRUE(a.ok() && b.ok());
    // Observing changes nothing the model computes.
    ASSERT_EQ(a->segments.size(), b->segments.size()) << f;
    for (size_t i = 0; i < a->segments.size(); ++i)
      EXPECT_EQ(a->segments[i].tokens, b->segments[i].tokens) << f;
  }
  auto im = quant::whisper_imatrix(kModel, files(), 2);
  ASSERT_TRUE(im.ok()) << im.status().to_string();
  EXPECT_EQ(im->n_clips, 3);
  // 2 encoder layers x 6 linears + 2 decoder layers x 10, each seen.
  EXPECT_EQ(im->sums.size(), 32u);
  for (const std::string& m : watched) {
    ASSERT_EQ(im->sums.count(m), 1u) << m;
    EXPECT_EQ(im->sums.at(m), direct[m]) << m;
    EXPECT_EQ(im->rows.at(m), rows[m]) << m;
    EXPECT_GT(rows[m], 0) << m;
  }
  // The encoder sees whole windows: a multiple of its 100 output rows (2 s windows).
  EXPECT_EQ(rows["model.encoder.layers.1.fc2"] % 100, 0);
}

TEST_F(WhisperOptRtn, WeightsAreTheSearchUnderTheImatrixAndDifferFromRtn) {
  EXPECT_NE(summary_.find("OPT-RTN"), std::string::npos) << summary_;
  EXPECT_NE(summary_.find("calibration: 3 audio files"), std::string::npos) << summary_;
  auto im = quant::whisper_imatrix(kModel, files(), 1);
  ASSERT_TRUE(im.ok()) << im.status().to_string();
  auto src = io::Checkpoint::open(kModel);
  auto out = io::Checkpoint::open(quantized_);
  ASSERT_TRUE(src.ok() && out.ok());
  auto parsed = io::parse_quant_config(
      nlohmann::json::parse(slurp(quantized_ + "/quantization_config.json")), "q");
  ASSERT_TRUE(parsed.ok());
  int checked = 0, moved = 0;
  for (const auto& [module, sums] : im->sums) {
    const Tensor t = *src->get(module + ".weight");
    const int64_t n = t.shape[0], k = t.shape[1];
    const std::vector<float> w = t.to_f32();
    const std::vector<float> imatrix = quant::imatrix_of(sums, im->n_clips);
    std::vector<float> want(n * k), got(n * k), rtn(n * k);
    formats::dequantize(quant::opt_rtn(w.data(), n, k, 4, 32, true, imatrix.data()), want.data());
    formats::dequantize(formats::rtn_quantize(w.data(), n, k, 4, 32, true), rtn.data());
    formats::StoredTensors stored;
    for (const char* s : {"qweight", "qzeros", "scales"}) stored[s] = *out->get(module + "." + s);
    auto q = formats::unpack(module, parsed->scheme_for(module), stored, n, k);
    ASSERT_TRUE(q.ok()) << q.status().to_string();
    formats::dequantize(*q, got.data());
    EXPECT_EQ(got, want) << module;
    if (got != rtn) ++moved;
    ++checked;
  }
  EXPECT_EQ(checked, 32);
  EXPECT_GT(moved, 0);
}

TEST_F(WhisperOptRtn, LoadsAndTranscribes) {
  auto r =
      run_cli("transcribe --threads 2 --temperature 0 --response-format verbose_json --model " +
                  quantized_ + " " + kAudio + "/hello_16k.wav",
              false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(nlohmann::json::parse(r.output)["text"].is_string());
}

TEST_F(WhisperOptRtn, ListFileAndNsamples) {
  const fs::path list = dir_ / "list.txt";
  std::ofstream(list) << "# clips\naudio/hello_16k.ogg\n\n" << calib_ << "/fox_16k.wav\n";
  auto f = quant::whisper_calibration_files(list.string(), 1);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(*f, std::vector<std::string>{(dir_ / "audio/hello_16k.ogg").string()});
  auto all = quant::whisper_calibration_files(list.string(), 128);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 2u);
  auto r = run_cli("quantize --model " + kModel + " --output_dir " + (dir_ / "list").string() +
                   kFlags + " --nsamples 1 --dataset " + list.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("calibration: 1 audio files"), std::string::npos) << r.output;
}

TEST_F(WhisperOptRtn, RefusesWhatItCannotUse) {
  const fs::path bad = dir_ / "bad";
  fs::create_directories(bad);
  fs::copy_file(kAudio + "/hello_16k.wav", bad / "a.wav");
  fs::copy_file(kAudio + "/README.md", bad / "b.md");
  const std::string out = (dir_ / "refused").string();
  for (const auto& [flags, why] : std::vector<std::pair<std::string, std::string>>{
           {"", "OPT-RTN on Whisper needs --dataset with audio files"},
           {" --dataset " + (dir_ / "none").string(), "no such file or directory"},
           {" --dataset " + bad.string(), "b.md: not a sound file"},
           {" --dataset " + kAudio + "/hello_16k.wav", "is a binary file"},
           {" --iters 50", "not AutoRound"}}) {
    auto r = run_cli("quantize --model " + kModel + " --output_dir " + out + kFlags + flags);
    EXPECT_NE(r.exit_code, 0) << flags;
    EXPECT_NE(r.output.find(why), std::string::npos) << flags << ": " << r.output;
  }
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace qs
