// tests: chat content parts (server/chat_content.h) and their image URLs (server/media_url.h):
// vLLM's content-format detection, parts as the template sees them in both formats, the part
// types refused and how, strict base64, and which URLs are read (data:, file:// under the
// allowed directory) or refused (http(s), file:// elsewhere or without the flag).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "server/chat_content.h"
#include "server/media_url.h"

namespace qs::server {
namespace {

namespace fs = std::filesystem;

constexpr const char* kQwenVlLoop =
    "{% for message in messages %}{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' %}<img>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{% endfor %}";

ChatMessages parse_ok(const std::string& json, bool openai_format) {
  ChatMessages out;
  auto e = parse_chat_messages(Json::parse(json), openai_format, {"<V>", "<A>", "<W>"}, &out);
  EXPECT_FALSE(e) << (e ? e->message : "");
  return out;
}

ApiError parse_error(const std::string& json) {
  ChatMessages out;
  auto e = parse_chat_messages(Json::parse(json), true, {"<V>", "<A>", "<W>"}, &out);
  EXPECT_TRUE(e.has_value()) << json;
  return e.value_or(ApiError{});
}

TEST(ChatContent, TemplatesThatLoopOverContentTakeParts) {
  EXPECT_TRUE(template_iterates_content(kQwenVlLoop));
  EXPECT_TRUE(template_iterates_content("{%- for part in message.content -%}{%- endfor %}"));
  EXPECT_FALSE(template_iterates_content(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"));
  EXPECT_FALSE(template_iterates_content("{{ content }} {% for x in tools %}{% endfor %}"));
  EXPECT_FALSE(template_iterates_content("{% for x in "));  // unterminated: no loop
}

TEST(ChatContent, OpenAiFormatKeepsThePartsInOrder) {
  const ChatMessages m = parse_ok(R"([
    {"role": "system", "content": "be brief"},
    {"role": "user", "name": "ann", "content": [
      {"type": "text", "text": "First:"},
      {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
      {"type": "text", "text": "then"},
      {"type": "image_url", "image_url": {"url": "file:///x.png"}}]}])",
                                  true);
  EXPECT_EQ(m.image_urls,
            (std::vector<std::string>{"data:image/png;base64,AAAA", "file:///x.png"}));
  EXPECT_EQ(m.messages[0]["content"], "be brief");
  EXPECT_EQ(m.messages[1]["name"], "ann");
  EXPECT_EQ(m.messages[1]["content"].dump(),
            R"([{"type":"text","text":"First:"},{"type":"image"},{"type":"text","text":"then"},)"
            R"({"type":"image"}])");
  EXPECT_EQ(m.final_text, "then");
}

TEST(ChatContent, StringFormatJoinsTextAfterAPlaceholderLinePerImage) {
  const ChatMessages m = parse_ok(R"([{"role": "user", "content": [
      {"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "data:,"}},
      {"type": "text", "text": "b"}, {"type": "image_url", "image_url": {"url": "data:,"}}]}])",
                                  false);
  EXPECT_EQ(m.messages[0]["content"], "<V>\n<V>\na\nb");
  EXPECT_EQ(m.image_urls.size(), 2u);
  // Text parts alone join with newlines, as before images were read.
  EXPECT_EQ(parse_ok(R"([{"role": "user", "content": [{"type": "text", "text": "a"},
                          {"type": "text", "text": "b"}]}])",
                     false)
                .messages[0]["content"],
            "a\nb");
}

TEST(ChatContent, VideoPartsBecomeUrlsAndVideoParts) {
  const std::string json = R"([{"role": "user", "content": [
      {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}},
      {"type": "text", "text": "a"}]}])";
  const ChatMessages m = parse_ok(json, true);
  EXPECT_EQ(m.video_urls, std::vector<std::string>{"data:video/mp4;base64,AAAA"});
  EXPECT_EQ(m.messages[0]["content"].dump(), R"([{"type":"video"},{"type":"text","text":"a"}])");
  EXPECT_EQ(parse_ok(json, false).messages[0]["content"], "<W>\na");
}

TEST(ChatContent, AudioPartsBecomeUrlsInPartOrder) {
  const std::string json = R"([{"role": "user", "content": [
      {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
      {"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "data:,"}},
      {"type": "audio_url", "audio_url": {"url": "file:///x.flac"}}]}])";
  const ChatMessages openai = parse_ok(json, true);
  // OpenAI's input_audio is read as vLLM reads it: a data URL of the named format.
  EXPECT_EQ(openai.audio_urls,
            (std::vector<std::string>{"data:audio/wav;base64,UklGRg==", "file:///x.flac"}));
  EXPECT_EQ(openai.image_urls.size(), 1u);
  EXPECT_EQ(openai.messages[0]["content"].dump(),
            R"([{"type":"audio"},{"type":"text","text":"a"},{"type":"image"},{"type":"audio"}])");
  // The string format's placeholder lines follow the parts' order.
  EXPECT_EQ(parse_ok(json, false).messages[0]["content"], "<A>\n<V>\n<A>\na");
  for (const char* bad :
       {R"([{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "x"}}]}])",
        R"([{"role": "user", "content": [{"type": "input_audio", "input_audio": "x"}]}])",
        R"([{"role": "user", "content": [{"type": "input_audio",
                "input_audio": {"data": "x", "format": "w/../av"}}]}])",
        R"([{"role": "user", "content": [{"type": "input_audio",
                "input_audio": {"data": 1, "format": "wav"}}]}])",
        R"([{"role": "user", "content": [{"type": "audio_url", "audio_url": {}}]}])"}) {
    const ApiError e = parse_error(bad);
    EXPECT_EQ(e.http_status, 400) << bad;
    EXPECT_EQ(e.param, "messages") << bad;
  }
}

TEST(ChatContent, BadPartsAreClear400s) {
  EXPECT_EQ(parse_error(R"([{"role": "user", "content": [{"type": "frobnicate"}]}])").message,
            "Unknown part type: frobnicate");
  const ApiError embeds = parse_error(
      R"([{"role": "user", "content": [{"type": "image_embeds", "image_embeds": ""}]}])");
  EXPECT_NE(embeds.message.find("'image_embeds' are not supported"), std::string::npos);
  EXPECT_EQ(embeds.http_status, 400);
  EXPECT_EQ(embeds.param, "messages");
  EXPECT_EQ(
      parse_error(R"([{"role": "user", "content": [{"type": "video_url", "video_url": {}}]}])")
          .param,
      "messages");
  for (const char* bad :
       {R"([{"role": "user", "content": [{"type": "image_url"}]}])",
        R"([{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}])",
        R"([{"role": "user", "content": [{"type": "image_url",
                                                            "image_url": {"url": 3}}]}])",
        R"([{"role": "user", "content": [{"type": "text"}]}])",
        R"([{"role": "user", "content": [7]}])",
        R"([{"role": "user", "content": {"type": "text"}}])", R"([{"content": "a"}])", R"([])",
        R"("hi")"}) {
    EXPECT_EQ(parse_error(bad).param, "messages") << bad;
  }
}

TEST(MediaUrl, Base64IsStrict) {
  EXPECT_EQ(base64_decode(""), "");
  EXPECT_EQ(base64_decode("aGk="), "hi");
  EXPECT_EQ(base64_decode("aGkh"), "hi!");
  EXPECT_EQ(base64_decode("aA=="), "h");
  EXPECT_EQ(base64_decode("+/8="), std::string("\xfb\xff", 2));
  for (const char* bad : {"aGk", "aGk=a===", "a===", "=aGk", "aG=k", "aGk!", "aG k", "aGk=\n"}) {
    EXPECT_FALSE(base64_decode(bad).has_value()) << bad;
  }
}

TEST(MediaUrl, DataUrlsDecodeAndOthersAreRefused) {
  std::string bytes;
  ASSERT_FALSE(load_media_url("data:image/png;base64,aGk=", "", &bytes));
  EXPECT_EQ(bytes, "hi");
  ASSERT_FALSE(load_media_url("data:;base64,aGk=", "", &bytes));
  EXPECT_EQ(bytes, "hi");
  auto message = [](const std::string& url, const std::string& dir = "") {
    std::string b;
    auto e = load_media_url(url, dir, &b);
    EXPECT_TRUE(e.has_value()) << url;
    return e ? e->message : "";
  };
  EXPECT_NE(message("data:image/png;base64,***").find("not valid base64"), std::string::npos);
  EXPECT_NE(message("data:image/png,rawbytes").find("Only base64"), std::string::npos);
  EXPECT_NE(message("data:image/png;base64").find("','"), std::string::npos);
  EXPECT_NE(message("https://example.com/cat.png").find("does not fetch remote media"),
            std::string::npos);
  EXPECT_NE(message("http://example.com/cat.png").find("does not fetch"), std::string::npos);
  EXPECT_NE(message("ftp://x").find("Unsupported image URL"), std::string::npos);
  EXPECT_NE(message("file:///etc/hostname").find("--allowed-local-media-path"), std::string::npos);
}

TEST(MediaUrl, FileUrlsOnlyUnderTheAllowedDirectory) {
  const fs::path root = fs::temp_directory_path() / ("qs_media_" + std::to_string(::getpid()));
  fs::create_directories(root / "allowed");
  std::ofstream(root / "allowed" / "a.png") << "png bytes";
  std::ofstream(root / "secret.png") << "secret";
  const std::string allowed = fs::canonical(root / "allowed").string();
  std::string bytes;
  ASSERT_FALSE(load_media_url("file://" + allowed + "/a.png", allowed, &bytes));
  EXPECT_EQ(bytes, "png bytes");
  for (const std::string& url :
       {"file://" + allowed + "/../secret.png", "file://" + (root / "secret.png").string(),
        std::string("file://relative.png"), "file://" + allowed + "/missing.png",
        "file://" + allowed}) {
    EXPECT_TRUE(load_media_url(url, allowed, &bytes).has_value()) << url;
  }
  fs::create_directory_symlink(root, root / "allowed" / "up");
  EXPECT_TRUE(load_media_url("file://" + allowed + "/up/secret.png", allowed, &bytes).has_value());
  fs::remove_all(root);
}

}  // namespace
}  // namespace qs::server
