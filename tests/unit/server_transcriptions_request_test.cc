// tests: /v1/audio/transcriptions forms (OpenAI's audio API as vLLM reads it): the defaults,
// every field's accepted values, each mistake a 400 naming its field (a foreign model a 404),
// and the transcriber options built from a request over the tiny Whisper fixture (the
// temperature rule: 0 is the fallback list, t > 0 is t alone).
#include <httplib.h>

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "audio/transcribe.h"
#include "server/transcriptions_handler.h"
#include "server/transcriptions_request.h"

namespace qs::server {
namespace {

constexpr const char* kModel = "whisper-tiny";
constexpr const char* kWhisper = QS_SOURCE_DIR "/tests/golden/fixtures/whisper/tiny_random";

// A multipart request with the audio in `file` and `fields` as text parts, as httplib parses it.
httplib::Request form(const std::vector<std::pair<std::string, std::string>>& fields,
                      bool with_file = true) {
  httplib::Request req;
  req.set_header("Content-Type", "multipart/form-data; boundary=xyz");
  if (with_file) req.files.emplace("file", httplib::MultipartFormData{"file", "RIFF", "a.wav", ""});
  for (const auto& [name, value] : fields) {
    req.files.emplace(name, httplib::MultipartFormData{name, value, "", ""});
  }
  return req;
}

ApiError expect_error(const httplib::Request& req) {
  TranscriptionsRequest r;
  std::optional<ApiError> e = parse_transcriptions_request(req, kModel, &r);
  EXPECT_TRUE(e);
  return e.value_or(ApiError{});
}

TEST(TranscriptionsRequestTest, DefaultsWithOnlyAFile) {
  const httplib::Request req = form({});
  TranscriptionsRequest r;
  ASSERT_FALSE(parse_transcriptions_request(req, kModel, &r));
  EXPECT_EQ(r.file, "RIFF");
  EXPECT_EQ(r.file_name, "a.wav");
  EXPECT_EQ(r.language, "");
  EXPECT_EQ(r.prompt, "");
  EXPECT_EQ(r.response_format, audio::TranscriptFormat::kJson);
  EXPECT_EQ(r.temperature, 0.0);
  EXPECT_TRUE(r.ignored_fields.empty());
}

TEST(TranscriptionsRequestTest, EveryFieldAsTheOpenAIClientSendsIt) {
  const httplib::Request req = form({{"model", kModel},
                                     {"language", "EN"},
                                     {"prompt", "Quantserve, Whisper."},
                                     {"response_format", "verbose_json"},
                                     {"temperature", "0.4"},
                                     {"timestamp_granularities[]", "segment"},
                                     {"stream", "false"}});
  TranscriptionsRequest r;
  ASSERT_FALSE(parse_transcriptions_request(req, kModel, &r));
  EXPECT_EQ(r.language, "en");
  EXPECT_EQ(r.prompt, "Quantserve, Whisper.");
  EXPECT_EQ(r.response_format, audio::TranscriptFormat::kVerboseJson);
  EXPECT_DOUBLE_EQ(r.temperature, 0.4);
  EXPECT_TRUE(r.ignored_fields.empty());
}

TEST(TranscriptionsRequestTest, EachResponseFormat) {
  const std::pair<const char*, audio::TranscriptFormat> formats[] = {
      {"json", audio::TranscriptFormat::kJson},
      {"text", audio::TranscriptFormat::kText},
      {"verbose_json", audio::TranscriptFormat::kVerboseJson},
      {"srt", audio::TranscriptFormat::kSrt},
      {"vtt", audio::TranscriptFormat::kVtt}};
  for (const auto& [name, format] : formats) {
    const httplib::Request req = form({{"response_format", name}});
    TranscriptionsRequest r;
    ASSERT_FALSE(parse_transcriptions_request(req, kModel, &r)) << name;
    EXPECT_EQ(r.response_format, format) << name;
  }
}

TEST(TranscriptionsRequestTest, NotMultipartIsA400NamingFile) {
  httplib::Request req;
  req.set_header("Content-Type", "application/json");
  req.body = R"({"file": "x"})";
  const ApiError e = expect_error(req);
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "file");
  EXPECT_NE(e.message.find("multipart/form-data"), std::string::npos) << e.message;
}

TEST(TranscriptionsRequestTest, MissingFileIsA400NamingIt) {
  const ApiError e = expect_error(form({{"model", kModel}}, /*with_file=*/false));
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "file");
  EXPECT_NE(e.message.find("'file' is required"), std::string::npos) << e.message;
}

TEST(TranscriptionsRequestTest, ModelMustBeTheServedOne) {
  const ApiError e = expect_error(form({{"model", "whisper-large"}}));
  EXPECT_EQ(e.http_status, 404);
  EXPECT_EQ(e.param, "model");
  EXPECT_NE(e.message.find("whisper-large"), std::string::npos);
  TranscriptionsRequest r;
  const httplib::Request empty_model = form({{"model", ""}});
  EXPECT_FALSE(parse_transcriptions_request(empty_model, kModel, &r));
}

TEST(TranscriptionsRequestTest, UnknownResponseFormatIsA400NamingIt) {
  for (const char* bad : {"xml", "JSON", "", "srt "}) {
    const ApiError e = expect_error(form({{"response_format", bad}}));
    EXPECT_EQ(e.http_status, 400) << bad;
    EXPECT_EQ(e.param, "response_format");
    EXPECT_NE(e.message.find("'" + std::string(bad) + "'"), std::string::npos) << e.message;
  }
}

TEST(TranscriptionsRequestTest, TemperatureIsANumberFromZeroToOne) {
  for (const char* good : {"0", "0.0", "1", "0.25", "1e-1"}) {
    TranscriptionsRequest r;
    const httplib::Request req = form({{"temperature", good}});
    EXPECT_FALSE(parse_transcriptions_request(req, kModel, &r)) << good;
  }
  for (const char* bad : {"", "hot", "-0.1", "1.5", "nan", "inf", " 0.5", "0.5x", "0x1p-2 "}) {
    const ApiError e = expect_error(form({{"temperature", bad}}));
    EXPECT_EQ(e.http_status, 400) << bad;
    EXPECT_EQ(e.param, "temperature") << bad;
  }
}

TEST(TranscriptionsRequestTest, OnlySegmentTimestamps) {
  TranscriptionsRequest r;
  const httplib::Request segment = form({{"timestamp_granularities[]", "segment"}});
  EXPECT_FALSE(parse_transcriptions_request(segment, kModel, &r));

  const ApiError word = expect_error(
      form({{"timestamp_granularities[]", "segment"}, {"timestamp_granularities[]", "word"}}));
  EXPECT_EQ(word.http_status, 400);
  EXPECT_EQ(word.param, "timestamp_granularities");
  EXPECT_NE(word.message.find("Word-level timestamps are not supported"), std::string::npos);

  const ApiError other = expect_error(form({{"timestamp_granularities", "sentence"}}));
  EXPECT_EQ(other.http_status, 400);
  EXPECT_NE(other.message.find("'sentence'"), std::string::npos);
}

TEST(TranscriptionsRequestTest, StreamingIsRefused) {
  const ApiError e = expect_error(form({{"stream", "true"}}));
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "stream");
}

TEST(TranscriptionsRequestTest, LanguageMustLookLikeACode) {
  for (const char* bad : {"e n", "en-US", "english-of-the-united-kingdom", "e\xc3\xa9"}) {
    const ApiError e = expect_error(form({{"language", bad}}));
    EXPECT_EQ(e.http_status, 400) << bad;
    EXPECT_EQ(e.param, "language");
  }
}

TEST(TranscriptionsRequestTest, OverlongPromptIsA400) {
  const ApiError e = expect_error(form({{"prompt", std::string(64 * 1024 + 1, 'a')}}));
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "prompt");
}

TEST(TranscriptionsRequestTest, UnknownFieldsAreReportedOnce) {
  const httplib::Request req =
      form({{"top_p", "0.9"}, {"include[]", "logprobs"}, {"include[]", "x"}});
  TranscriptionsRequest r;
  ASSERT_FALSE(parse_transcriptions_request(req, kModel, &r));
  EXPECT_EQ(r.ignored_fields, (std::vector<std::string>{"include[]", "top_p"}));
}

class TranscribeOptionsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Result<audio::WhisperTranscriber> w = audio::WhisperTranscriber::load(kWhisper);
    ASSERT_TRUE(w.ok()) << w.status().message();
    whisper_ = new audio::WhisperTranscriber(std::move(*w));
  }
  static void TearDownTestSuite() { delete whisper_; }
  static audio::WhisperTranscriber* whisper_;
};
audio::WhisperTranscriber* TranscribeOptionsTest::whisper_ = nullptr;

TEST_F(TranscribeOptionsTest, ZeroTemperatureKeepsTheFallbackList) {
  TranscriptionsRequest r;
  r.prompt = "names";
  audio::TranscribeOptions o;
  ASSERT_FALSE(transcribe_options(r, *whisper_, &o));
  EXPECT_EQ(o.decode.temperatures, whisper_->default_options().decode.temperatures);
  EXPECT_GT(o.decode.temperatures.size(), 1u);
  EXPECT_EQ(o.decode.temperatures[0], 0.0f);
  EXPECT_EQ(o.initial_prompt, "names");
  EXPECT_EQ(o.decode.suppress_tokens, whisper_->default_options().decode.suppress_tokens);
}

TEST_F(TranscribeOptionsTest, PositiveTemperatureIsTheOnlyOne) {
  TranscriptionsRequest r;
  r.temperature = 0.3;
  audio::TranscribeOptions o;
  ASSERT_FALSE(transcribe_options(r, *whisper_, &o));
  EXPECT_EQ(o.decode.temperatures, std::vector<float>{0.3f});
}

TEST_F(TranscribeOptionsTest, EnglishOnlyModelTakesAnyLanguage) {
  ASSERT_FALSE(whisper_->tokens().multilingual);
  TranscriptionsRequest r;
  r.language = "de";
  audio::TranscribeOptions o;
  EXPECT_FALSE(transcribe_options(r, *whisper_, &o));
  EXPECT_EQ(o.language, "de");
}

}  // namespace
}  // namespace qs::server
