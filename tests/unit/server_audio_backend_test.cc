// tests: the speech engine thread over the tiny Whisper fixture: a job's transcript is the
// transcriber's own, jobs finish in the order they were queued, a job cancelled while queued
// never runs, and shutdown gives every queued job its callback and refuses new ones.
#include <gtest/gtest.h>

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

// A second of a 440 Hz tone at 16 kHz.
std::vector<float> tone() {
  std::vector<float> s(16000);
  for (size_t i = 0; i < s.size(); ++i) {
    s[i] = 0.5f * static_cast<float>(std::sin(2.0 * M_PI * 440.0 * static_cast<double>(i) / 16000));
  }
  return s;
}

audio::WhisperTranscriber load() {
  Result<audio::WhisperTranscriber> w = audio::WhisperTranscriber::load(kWhisper);
  QS_CHECK_MSG(w.ok(), "the tiny Whisper fixture does not load");
  return std::move(*w);
}

AudioJob job(const audio::WhisperTranscriber& w, bool cancelled = false) {
  AudioJob j;
  j.samples = tone();
  j.options = w.default_options();
  j.cancelled = std::make_shared<std::atomic<bool>>(cancelled);
  return j;
}

TEST(AudioBackendTest, TranscriptIsTheTranscribersInQueueOrder) {
  audio::WhisperTranscriber whisper = load();
  ThreadPool direct_pool(1);
  Result<audio::Transcript> direct =
      whisper.transcribe(tone(), whisper.default_options(), direct_pool);
  ASSERT_TRUE(direct.ok()) << direct.status().message();

  ThreadPool pool(1);
  AudioBackend backend(std::move(whisper), pool);
  Log log;
  ASSERT_TRUE(backend.submit(job(backend.transcriber()), log.callback("a")).ok());
  ASSERT_TRUE(backend.submit(job(backend.transcriber(), true), log.callback("b")).ok());
  ASSERT_TRUE(backend.submit(job(backend.transcriber()), log.callback("c")).ok());
  EXPECT_EQ(log.wait_for(3),
            (std::vector<std::string>{"a:" + direct->text(), "b:cancelled before it started",
                                      "c:" + direct->text()}));
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
