// audio: a Transcript in the response formats of OpenAI's /v1/audio/transcriptions, which
// `transcribe` prints and `serve` answers with: text, json ({"text"}), verbose_json (task,
// language, duration, text, segments with their timing and decoding figures), srt and vtt
// subtitles.
#pragma once

#include <optional>
#include <string>

#include "audio/transcribe.h"

namespace qs::audio {

enum class TranscriptFormat { kText, kJson, kVerboseJson, kSrt, kVtt };

std::optional<TranscriptFormat> parse_transcript_format(const std::string& name);

// "00:01:02,500" (srt) or "00:01:02.500" (vtt): hours always, milliseconds rounded.
std::string subtitle_time(double seconds, char decimal_mark);

// The body in `format`; text and subtitle bodies end with a newline as OpenAI's do.
std::string format_transcript(const Transcript& t, TranscriptFormat format);

// The content type of that body.
const char* transcript_content_type(TranscriptFormat format);

}  // namespace qs::audio
