// apps: `quantserve transcribe --model DIR FILE... [--language en] [--task transcribe]
// [--response-format text|json|verbose_json|srt|vtt] [--temperature 0[,0.2,...]]`: speech
// to text with a Whisper checkpoint (16-bit or quantized), one transcript per file on stdout,
// timings on stderr.
#include <chrono>
#include <cstdio>
#include <string>

#include "apps/commands.h"
#include "apps/flags.h"
#include "apps/model_flags.h"
#include "audio/sound_file.h"
#include "audio/transcribe.h"
#include "audio/transcript_format.h"

namespace qs::apps {
namespace {

Status check(const Flags& flags) {
  if (!flags.has("model")) return invalid_argument("--model DIR is required");
  if (flags.positionals().empty()) return invalid_argument("give at least one audio FILE");
  if (!audio::parse_transcript_format(flags.get("response-format"))) {
    return invalid_argument("--response-format must be text, json, verbose_json, srt or vtt");
  }
  for (const char* f : {"threads", "best-of", "seed"}) {
    QS_RETURN_IF_ERROR(flags.get_int(f).status());
  }
  for (const char* f : {"max-audio-seconds", "no-speech-threshold", "log-prob-threshold",
                        "compression-ratio-threshold"}) {
    QS_RETURN_IF_ERROR(flags.get_double(f).status());
  }
  const std::string task = flags.get("task");
  if (task != "transcribe" && task != "translate") {
    return invalid_argument("--task must be transcribe or translate");
  }
  return ok_status();
}

Result<std::vector<float>> parse_temperatures(const std::string& list) {
  std::vector<float> out;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, comma - at);
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !(v >= 0.0 && v <= 2.0)) {
      return invalid_argument("--temperature: \"" + item +
                              "\" is not a temperature in [0, 2] (a comma-separated list "
                              "gives the fallback)");
    }
    out.push_back(static_cast<float>(v));
    at = comma + 1;
  }
  return out;
}

Status run(const Flags& flags) {
  QS_ASSIGN_OR_RETURN(int64_t threads, flags.get_int("threads"));
  if (threads <= 0 || threads > 1024) return invalid_argument("--threads must be 1 to 1024");
  QS_ASSIGN_OR_RETURN(double max_seconds, flags.get_double("max-audio-seconds"));
  if (!(max_seconds > 0)) return invalid_argument("--max-audio-seconds must be positive");
  const audio::TranscriptFormat format =
      *audio::parse_transcript_format(flags.get("response-format"));

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  QS_ASSIGN_OR_RETURN(const std::string dir, resolve_model_flag(flags, flags.get("model")));
  QS_ASSIGN_OR_RETURN(audio::WhisperTranscriber whisper, audio::WhisperTranscriber::load(dir));
  ThreadPool pool(static_cast<int>(threads));
  std::fprintf(stderr, "transcribe: loaded %s in %.2f s\n", flags.get("model").c_str(),
               std::chrono::duration<double>(clock::now() - t0).count());

  audio::TranscribeOptions options = whisper.default_options();
  options.language = flags.get("language");
  options.task = flags.get("task");
  options.initial_prompt = flags.get("prompt");
  options.condition_on_previous_text = !flags.get_bool("no-condition-on-previous-text");
  QS_ASSIGN_OR_RETURN(options.decode.temperatures, parse_temperatures(flags.get("temperature")));
  QS_ASSIGN_OR_RETURN(int64_t best_of, flags.get_int("best-of"));
  if (best_of < 1 || best_of > 64) return invalid_argument("--best-of must be 1 to 64");
  options.decode.best_of = static_cast<int>(best_of);
  QS_ASSIGN_OR_RETURN(int64_t seed, flags.get_int("seed"));
  options.decode.seed = static_cast<uint64_t>(seed);
  QS_ASSIGN_OR_RETURN(options.decode.no_speech_threshold, flags.get_double("no-speech-threshold"));
  QS_ASSIGN_OR_RETURN(options.decode.log_prob_threshold, flags.get_double("log-prob-threshold"));
  QS_ASSIGN_OR_RETURN(options.decode.compression_ratio_threshold,
                      flags.get_double("compression-ratio-threshold"));
  options.decode.without_timestamps = flags.get_bool("without-timestamps");

  audio::ReadOptions read;
  read.target_rate = whisper.mel_config().sample_rate;
  read.max_seconds = max_seconds;
  for (const std::string& file : flags.positionals()) {
    const auto t1 = clock::now();
    QS_ASSIGN_OR_RETURN(audio::Sound sound, audio::read_sound_file(file, read));
    QS_ASSIGN_OR_RETURN(audio::Transcript t, whisper.transcribe(sound.samples, options, pool));
    const double secs = std::chrono::duration<double>(clock::now() - t1).count();
    std::fputs(audio::format_transcript(t, format).c_str(), stdout);
    if (format == audio::TranscriptFormat::kJson ||
        format == audio::TranscriptFormat::kVerboseJson) {
      std::fputs("\n", stdout);
    }
    std::fflush(stdout);
    std::fprintf(stderr, "transcribe: %s: %.2f s of audio in %.2f s (%.1fx real time)\n",
                 file.c_str(), t.duration, secs, secs > 0 ? t.duration / secs : 0.0);
  }
  return ok_status();
}

}  // namespace

int cmd_transcribe(const Args& args) {
  Flags flags;
  flags.takes_positionals("FILE...");
  add_revision_flag(flags);
  flags.add("model", "Whisper checkpoint directory (WhisperForConditionalGeneration)")
      .add("language",
           "spoken language code (en, de, ...); detected when empty on a "
           "multilingual model")
      .add("task", "transcribe, or translate into English (multilingual models)", false,
           "transcribe")
      .add("response-format", "text, json, verbose_json, srt or vtt", false, "text")
      .add("temperature",
           "sampling temperature; a comma-separated list is the fallback Whisper walks when "
           "a window's text is too repetitive or unlikely",
           false, "0,0.2,0.4,0.6,0.8,1")
      .add("best-of", "sampled candidates per fallback temperature", false, "5")
      .add("seed", "seed of the fallback's sampling", false, "0")
      .add("prompt", "text to condition the first window on (names, spelling)")
      .add("no-condition-on-previous-text", "do not prompt each window with the text so far", true)
      .add("without-timestamps", "decode without timestamp tokens (one segment per window)", true)
      .add("no-speech-threshold", "skip a window whose no-speech probability exceeds this", false,
           "0.6")
      .add("log-prob-threshold", "fall back when the average log-probability is below this", false,
           "-1.0")
      .add("compression-ratio-threshold", "fall back when the text compresses more than this",
           false, "2.4")
      .add("max-audio-seconds", "refuse longer files (from their header)", false, "14400")
      .add("threads", "worker threads", false, std::to_string(ThreadPool::default_threads()));
  return run_command("transcribe", flags, args, check, run);
}

}  // namespace qs::apps
