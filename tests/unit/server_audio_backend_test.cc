// tests: the speech engine thread over the tiny Whisper fixture: a job's transcript is the
// transcriber's own when several recordings of different lengths share the batched decoder
// steps, a job cancelled while queued never runs, and shutdown gives every queued job its
// callback and refuses new ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "core/check.h"
#include "server/audio_backend.h"

namespace qs::server {
namespace {

constexpr const char* kWhisper = QS_SOURCE_DIR "/tests/golden/fixtures/whisper/tiny_random";

// What the callbacks saw, in the order the engine thread called them.
struct Log {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> done;  // "name:<text>" or "name:<error message>"

  AudioCallback callback(const std::string& name) {
    return [this, name](Result<audio::Transcript> r) {
      std::lock_guard<std::mutex> lock(mu);
      done.push_back(name + ":" + (r.ok() ? r->text() : r.status().message()));
      cv.notify_all();
    };
  }
  std::vector<std::string> wait_for(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return done.size() >= n; }));
    return done;
  }
};

// `seconds` of a tone at 16 kHz (the fixture's windows are 2 s: 5 s take three).
std::vector<float> tone(double seconds = 1.0, double hz = 440.0) {
  std::vector<float> s(static_cast<size_t>(seconds * 16000));
  for (size_t i = 0; i < s.size(); ++i) {
    s[i] = 0.5f * static_cast<float>(std::sin(2.0 * M_PI * hz * static_cast<double>(i) / 16000));
  }
  return s;
}

audio::WhisperTranscriber load() {
  Result<audio::WhisperTranscriber> w = audio::WhisperTranscriber::load(kWhisper);
  QS_CHECK_MSG(w.ok(), "the tiny Whisper fixture does not load");
  return std::move(*w);
}

AudioJob job(const audio::WhisperTranscriber& w, bool cancelled = false,
             std::vector<float> samples = tone()) {
  AudioJob j;
  j.samples = std::move(samples);
  j.options = w.default_options();
  j.cancelled = std::make_shared<std::atomic<bool>>(cancelled);
  return j;
}

// Three recordings at once (1 s, 5 s over three windows, 3 s at another pitch, with a
// fallback temperature list so that sampled best-of passes join the batch too) and one
// cancelled: each transcript equals what the transcriber gives the recording alone.
TEST(AudioBackendTest, BatchedTranscriptsAreTheTranscribersOwn) {
  audio::WhisperTranscriber whisper = load();
  const std::vector<std::vector<float>> clips = {tone(), tone(5.0, 300.0), tone(3.0, 1000.0)};
  std::vector<std::string> want;
  ThreadPool direct_pool(1);
  for (size_t i = 0; i < clips.size(); ++i) {
    Result<audio::Transcript> direct =
        whisper.transcribe(clips[i], whisper.default_options(), direct_pool);
    ASSERT_TRUE(direct.ok()) << direct.status().message();
    want.push_back(std::string(1, static_cast<char>('a' + i)) + ":" + direct->text());
  }
  want.push_back("x:cancelled before it started");

  ThreadPool pool(1);
  AudioBackend backend(std::move(whisper), pool);
  Log log;
  ASSERT_TRUE(backend.submit(job(backend.transcriber(), false, clips[0]), log.callback("a")).ok());
  ASSERT_TRUE(backend.submit(job(backend.transcriber(), true), log.callback("x")).ok());
  ASSERT_TRUE(backend.submit(job(backend.transcriber(), false, clips[1]), log.callback("b")).ok());
  ASSERT_TRUE(backend.submit(job(backend.transcriber(), false, clips[2]), log.callback("c")).ok());
  std::vector<std::string> got = log.wait_for(4);
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  EXPECT_TRUE(backend.healthy());
}

TEST(AudioBackendTest, ShutdownAnswersEveryQueuedJobAndRefusesNewOnes) {
  ThreadPool pool(1);
  AudioBackend backend(load(), pool);
  Log log;
  for (const char* name : {"a", "b", "c", "d"}) {
    ASSERT_TRUE(backend.submit(job(backend.transcriber()), log.callback(name)).ok());
  }
  backend.shutdown();
  EXPECT_EQ(log.wait_for(4).size(), 4u);
  EXPECT_FALSE(backend.healthy());
  EXPECT_FALSE(backend.submit(job(backend.transcriber()), log.callback("e")).ok());
  backend.shutdown();  // idempotent
}

}  // namespace
}  // namespace qs::server
