// audio: transcript response formats (see transcript_format.h).
#include "audio/transcript_format.h"

#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace qs::audio {

namespace {

// OpenAI's verbose_json names the language in English words; the codes Whisper speaks
// most are listed, any other is given as its code.
std::string language_name(const std::string& code) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"en", "english"},    {"zh", "chinese"},   {"de", "german"},  {"es", "spanish"},
      {"ru", "russian"},    {"ko", "korean"},    {"fr", "french"},  {"ja", "japanese"},
      {"pt", "portuguese"}, {"tr", "turkish"},   {"pl", "polish"},  {"ca", "catalan"},
      {"nl", "dutch"},      {"ar", "arabic"},    {"sv", "swedish"}, {"it", "italian"},
      {"id", "indonesian"}, {"hi", "hindi"},     {"fi", "finnish"}, {"vi", "vietnamese"},
      {"he", "hebrew"},     {"uk", "ukrainian"}, {"el", "greek"},   {"cs", "czech"}};
  for (const auto& [c, name] : kNames) {
    if (code == c) return name;
  }
  return code;
}

}  // namespace

std::optional<TranscriptFormat> parse_transcript_format(const std::string& name) {
  if (name == "text") return TranscriptFormat::kText;
  if (name == "json") return TranscriptFormat::kJson;
  if (name == "verbose_json") return TranscriptFormat::kVerboseJson;
  if (name == "srt") return TranscriptFormat::kSrt;
  if (name == "vtt") return TranscriptFormat::kVtt;
  return std::nullopt;
}

std::string subtitle_time(double seconds, char decimal_mark) {
  const long long ms = std::llround(std::max(seconds, 0.0) * 1000.0);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%02lld:%02lld:%02lld%c%03lld", ms / 3600000, (ms / 60000) % 60,
                (ms / 1000) % 60, decimal_mark, ms % 1000);
  return buf;
}

std::string format_transcript(const Transcript& t, TranscriptFormat format) {
  switch (format) {
    case TranscriptFormat::kText:
      return t.text() + "\n";
    case TranscriptFormat::kJson:
      return nlohmann::json{{"text", t.text()}}.dump();
    case TranscriptFormat::kVerboseJson: {
      nlohmann::ordered_json segs = nlohmann::ordered_json::array();
      for (const TranscriptSegment& s : t.segments) {
        segs.push_back({{"id", s.id},
                        {"seek", s.seek},
                        {"start", s.start},
                        {"end", s.end},
                        {"text", s.text},
                        {"tokens", s.tokens},
                        {"temperature", s.temperature},
                        {"avg_logprob", s.avg_logprob},
                        {"compression_ratio", s.compression_ratio},
                        {"no_speech_prob", s.no_speech_prob}});
      }
      return nlohmann::ordered_json{{"task", t.task},
                                    {"language", language_name(t.language)},
                                    {"duration", t.duration},
                                    {"text", t.text()},
                                    {"segments", segs}}
          .dump();
    }
    case TranscriptFormat::kSrt: {
      std::string out;
      int64_t n = 0;
      for (const TranscriptSegment& s : t.segments) {
        out += std::to_string(++n) + "\n" + subtitle_time(s.start, ',') + " --> " +
               subtitle_time(s.end, ',') + "\n" + strip_whitespace(s.text) + "\n\n";
      }
      return out;
    }
    case TranscriptFormat::kVtt: {
      std::string out = "WEBVTT\n\n";
      for (const TranscriptSegment& s : t.segments) {
        out += subtitle_time(s.start, '.') + " --> " + subtitle_time(s.end, '.') + "\n" +
               strip_whitespace(s.text) + "\n\n";
      }
      return out;
    }
  }
  return "";
}

const char* transcript_content_type(TranscriptFormat format) {
  switch (format) {
    case TranscriptFormat::kJson:
    case TranscriptFormat::kVerboseJson:
      return "application/json";
    case TranscriptFormat::kSrt:
    case TranscriptFormat::kVtt:
      return "text/plain; charset=utf-8";
    default:
      return "text/plain; charset=utf-8";
  }
}

}  // namespace qs::audio
