// golden: `quantserve transcribe` end to end on the tiny random Whisper checkpoint (2 s
// windows, a byte-level tokenizer in Whisper's layout): every response format is well formed
// and the same run twice gives the same text; a file longer than a window walks several
// windows; bad files and flags are messages with a non-zero exit, never a crash. Real speech
// against faster-whisper is scripts/check_whisper_transcribe.py (docs/audio.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../common/cli.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

const fs::path kModel = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/whisper/tiny_random";
const fs::path kAudio = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/audio";

class TranscribeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qs_transcribe_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }
  std::string cmd(const std::string& rest) {
    return "transcribe --threads 2 --model " + kModel.string() + " " + rest;
  }
  fs::path dir_;
};

TEST_F(TranscribeCli, EveryFormatIsWellFormedAndRepeatable) {
  const std::string wav = (kAudio / "hello_16k.wav").string();
  const auto verbose = run_cli(cmd("--response-format verbose_json " + wav), false);
  ASSERT_EQ(verbose.exit_code, 0) << verbose.output;
  const auto v = nlohmann::json::parse(verbose.output);
  EXPECT_EQ(v["task"], "transcribe");
  EXPECT_EQ(v["language"], "english");
  EXPECT_GT(v["duration"].get<double>(), 1.0);
  for (const auto& s : v["segments"]) {
    EXPECT_LE(s["start"].get<double>(), s["end"].get<double>());
    EXPECT_TRUE(s["text"].is_string());
  }
  const auto again = run_cli(cmd("--response-format verbose_json " + wav), false);
  EXPECT_EQ(again.output, verbose.output);

  const auto json = run_cli(cmd("--response-format json " + wav), false);
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_EQ(nlohmann::json::parse(json.output)["text"], v["text"]);
  const auto text = run_cli(cmd("--response-format text " + wav), false);
  EXPECT_EQ(text.output, v["text"].get<std::string>() + "\n");
  const auto vtt = run_cli(cmd("--response-format vtt " + wav), false);
  EXPECT_EQ(vtt.output.rfind("WEBVTT\n\n", 0), 0u) << vtt.output;
  const auto srt = run_cli(cmd("--response-format srt " + wav), false);
  ASSERT_EQ(srt.exit_code, 0);
  if (!v["segments"].empty()) {
    EXPECT_EQ(srt.output.rfind("1\n00:00:", 0), 0u) << srt.output;
  }
}

// Three files in one call; the FLAC is stereo at 22.05 kHz (resampled) and longer than the
// model's 2 s window.
TEST_F(TranscribeCli, SeveralFilesAndFormats) {
  const auto r = run_cli(
      cmd("--response-format json " + (kAudio / "hello_16k.wav").string() + " " +
          (kAudio / "fox_22050_stereo.flac").string() + " " + (kAudio / "hello_16k.ogg").string()),
      false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int lines = 0;
  for (char c : r.output) lines += c == '\n';
  EXPECT_EQ(lines, 3) << r.output;
}

TEST_F(TranscribeCli, BadInputIsAMessage) {
  const std::string empty = write("empty.wav", "");
  const std::string junk = write("junk.wav", std::string(4000, 'x'));
  std::string wav;
  {
    std::ifstream in(kAudio / "hello_16k.wav", std::ios::binary);
    wav.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string truncated = write("truncated.wav", wav.substr(0, 30));
  for (const std::string& f : {empty, junk, truncated, (dir_ / "missing.wav").string()}) {
    const auto r = run_cli(cmd(f));
    EXPECT_NE(r.exit_code, 0) << f;
    EXPECT_NE(r.output.find("transcribe:"), std::string::npos) << r.output;
  }
  const std::string wav_path = (kAudio / "hello_16k.wav").string();
  EXPECT_NE(run_cli(cmd("--response-format xml " + wav_path)).exit_code, 0);
  EXPECT_NE(run_cli(cmd("--temperature hot " + wav_path)).exit_code, 0);
  EXPECT_NE(run_cli(cmd("--max-audio-seconds 0.5 " + wav_path)).exit_code, 0);
  EXPECT_NE(run_cli("transcribe --model " + kModel.string()).exit_code, 0);  // no file
  const auto not_whisper =
      run_cli("transcribe --model " + (fs::path(QS_SOURCE_DIR) / "models/stories260K").string() +
              " " + wav_path);
  EXPECT_NE(not_whisper.exit_code, 0);
}

}  // namespace
}  // namespace qs
