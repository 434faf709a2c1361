// server: the transcriptions endpoint (see transcriptions_handler.h).
#include "server/transcriptions_handler.h"

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>

#include "audio/sound_file.h"
#include "audio/transcript_format.h"
#include "core/log.h"
#include "server/client_connection.h"

namespace qs::server {
namespace {

// What the engine thread hands back to the waiting HTTP thread.
struct TranscriptionSession {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::optional<Result<audio::Transcript>> result;
};

int64_t decoded_tokens(const audio::Transcript& t) {
  int64_t n = 0;
  for (const audio::TranscriptSegment& s : t.segments) n += static_cast<int64_t>(s.tokens.size());
  return n;
}

}  // namespace

std::optional<ApiError> transcribe_options(const TranscriptionsRequest& r,
                                           const audio::WhisperTranscriber& whisper,
                                           audio::TranscribeOptions* out) {
  const audio::WhisperTokens& ids = whisper.tokens();
  if (!r.language.empty() && ids.multilingual && !ids.languages.count(r.language)) {
    return bad_request("Language '" + r.language + "' is not one this model knows.", "language");
  }
  *out = whisper.default_options();
  out->language = r.language;
  out->initial_prompt = r.prompt;
  if (r.temperature > 0) out->decode.temperatures = {static_cast<float>(r.temperature)};
  return std::nullopt;
}

TranscriptionsHandler::TranscriptionsHandler(const ModelInfo& model, AudioBackend& backend,
                                             ServerMetrics& metrics, InflightRequests& inflight,
                                             double max_audio_seconds)
    : model_(model),
      backend_(backend),
      metrics_(metrics),
      inflight_(inflight),
      max_audio_seconds_(max_audio_seconds) {}

void TranscriptionsHandler::handle(const httplib::Request& req, httplib::Response& res,
                                   const std::string& request_id) {
  const auto started = std::chrono::steady_clock::now();
  auto reject = [&](const ApiError& e) {
    QS_LOG_INFO("request %s rejected: %s", request_id.c_str(), e.message.c_str());
    send_error(res, e);
  };
  TranscriptionsRequest r;
  if (auto e = parse_transcriptions_request(req, model_.served_model_name, &r)) return reject(*e);
  for (const std::string& key : r.ignored_fields) {
    QS_LOG_WARN("request %s: the following fields were present in the request but ignored: %s",
                request_id.c_str(), key.c_str());
  }
  const audio::WhisperTranscriber& whisper = backend_.transcriber();
  AudioJob job;
  if (auto e = transcribe_options(r, whisper, &job.options)) return reject(*e);
  if (!r.language.empty() && r.language != "en" && !whisper.tokens().multilingual) {
    QS_LOG_WARN("request %s: language '%s' asked of an English-only model; transcribing as English",
                request_id.c_str(), r.language.c_str());
  }
  // Every way an upload can fail to be audio (empty, truncated, not a sound file, a rate or
  // length past the limits) is the client's to fix.
  audio::ReadOptions read;
  read.target_rate = whisper.mel_config().sample_rate;
  read.max_seconds = max_audio_seconds_;
  Result<audio::Sound> sound = audio::read_sound_bytes(r.file, r.file_name, read);
  if (!sound.ok()) return reject(bad_request(sound.status().message(), "file"));
  const double audio_seconds =
      static_cast<double>(sound->samples.size()) / static_cast<double>(read.target_rate);
  job.samples = std::move(sound->samples);
  job.cancelled = std::make_shared<std::atomic<bool>>(false);
  QS_LOG_INFO("request %s: %.2f s of audio (%lld Hz, %d channel(s)), %s", request_id.c_str(),
              audio_seconds, static_cast<long long>(sound->source_rate), sound->source_channels,
              audio::transcript_content_type(r.response_format));

  auto session = std::make_shared<TranscriptionSession>();
  const std::vector<std::string> ids = {"trsc-" + random_request_id()};
  const std::shared_ptr<std::atomic<bool>> cancelled = job.cancelled;
  inflight_.add(ids);
  Status submitted = backend_.submit(std::move(job), [session](Result<audio::Transcript> out) {
    std::lock_guard<std::mutex> lock(session->mu);
    session->result = std::move(out);
    session->done = true;
    session->cv.notify_all();
  });
  if (!submitted.ok()) {
    inflight_.remove(ids);
    return send_error(res, service_unavailable("The server is shutting down."));
  }
  {
    // Nothing is sent before the transcript is done: watch the client meanwhile.
    const std::optional<ClientConnection> connection = ClientConnection::of(req);
    std::unique_lock<std::mutex> lock(session->mu);
    while (!session->cv.wait_for(lock, kHangUpPollInterval, [&] { return session->done; })) {
      if (connection && connection->hung_up()) {
        QS_LOG_INFO("request %s: client went away, cancelling its transcription",
                    request_id.c_str());
        cancelled->store(true);
        lock.unlock();
        inflight_.remove(ids);
        res.status = kClientClosedRequest;
        return;
      }
    }
  }
  inflight_.remove(ids);
  const Result<audio::Transcript>& result = *session->result;
  if (!result.ok()) {
    if (!backend_.healthy())
      return send_error(res, service_unavailable("The server is shutting down."));
    return send_error(res, error_from_status(result.status()));
  }
  res.set_content(audio::format_transcript(*result, r.response_format),
                  audio::transcript_content_type(r.response_format));
  metrics_.transcription_finished(
      result->duration,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
      decoded_tokens(*result));
}

}  // namespace qs::server
