// server: POST /v1/audio/transcriptions on a Whisper server. The form is parsed and the upload
// decoded here, on the HTTP thread (a file that is no audio, is truncated or lasts past the
// limit is a 400 before anything is queued; the limit is checked from the header, before
// decoding); then one AudioJob goes to the AudioBackend and the HTTP thread waits, watching its
// client: a client that hangs up before its job starts cancels it. The transcript is answered
// in the asked format (json, text, verbose_json, srt or vtt).
#pragma once

#include <string>

#include "server/audio_backend.h"
#include "server/generation_handler.h"
#include "server/metrics.h"
#include "server/transcriptions_request.h"

namespace qs::server {

class TranscriptionsHandler {
 public:
  // All references must outlive the handler. Recordings longer than `max_audio_seconds` are
  // refused.
  TranscriptionsHandler(const ModelInfo& model, AudioBackend& backend, ServerMetrics& metrics,
                        InflightRequests& inflight, double max_audio_seconds);

  void handle(const httplib::Request& req, httplib::Response& res, const std::string& request_id);

 private:
  const ModelInfo& model_;
  AudioBackend& backend_;
  ServerMetrics& metrics_;
  InflightRequests& inflight_;
  const double max_audio_seconds_;
};

// The transcriber's options for a request: the checkpoint's defaults, the request's language
// and prompt, and its temperature (0: the default fallback list; t > 0: t alone). An unknown
// language on a multilingual model is a 400; on an English-only model any language is served
// as English, as Whisper does.
std::optional<ApiError> transcribe_options(const TranscriptionsRequest& r,
                                           const audio::WhisperTranscriber& whisper,
                                           audio::TranscribeOptions* out);

}  // namespace qs::server
