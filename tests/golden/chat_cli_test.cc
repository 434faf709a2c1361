// golden: `quantserve chat` through the built binary over piped stdin, on stories260K with
// a small chat template written next to a copy of it: replies are streamed one per turn,
// the conversation is kept (turn 2's prompt holds turn 1's reply), /reset and /exit work,
// a turn that does not fit the context is reported and the conversation goes on, and a
// greedy first reply equals `generate --chat` on the same message.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'] }}\n"
    "{% elif m['role'] == 'user' %}User: {{ m['content'] }}\n"
    "{% else %}Assistant: {{ m['content'] }}</s>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string l; std::getline(ss, l);) out.push_back(l);
  return out;
}

struct RunResult {
  int rc = -1;
  std::string out, err;
};

class ChatCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("qs_chat_cli_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "model");
    for (const auto& e : fs::directory_iterator(fs::path(QS_SOURCE_DIR) / "models/stories260K")) {
      fs::copy_file(e.path(), dir_ / "model" / e.path().filename());
    }
    std::ofstream(dir_ / "model/chat_template.jinja") << kTemplate;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs the binary with `input` on stdin; `args` are shell words (quote them yourself).
  RunResult run(const std::string& input, const std::string& args) {
    std::ofstream(dir_ / "stdin.txt", std::ios::binary) << input;
    const std::string cmd = std::string("'") + QS_BINARY + "' " + args + " < '" +
                            (dir_ / "stdin.txt").string() + "' > '" + (dir_ / "out.txt").string() +
                            "' 2> '" + (dir_ / "err.txt").string() + "'";
    const int status = std::system(cmd.c_str());
    RunResult r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read_file(dir_ / "out.txt");
    r.err = read_file(dir_ / "err.txt");
    return r;
  }

  std::string model() const { return "--model '" + (dir_ / "model").string() + "'"; }

  fs::path dir_;
};

TEST_F(ChatCliTest, KeepsTheConversationAcrossTurns) {
  const RunResult r = run("Once upon a time\nThe cat\n/exit\nnever read\n",
                          "chat " + model() +
                              " --temperature 0 --max-tokens 24 --verbose-prompt --system "
                              "'A story.'");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto replies = lines(r.out);
  ASSERT_EQ(replies.size(), 2u) << r.out;  // nothing after /exit
  EXPECT_FALSE(replies[0].empty());
  EXPECT_NE(r.err.find("<s>A story.\nUser: Once upon a time\nAssistant:\n[chat] end of prompt"),
            std::string::npos)
      << r.err;
  const std::string second_prompt =
      "<s>A story.\nUser: Once upon a time\nAssistant: " + replies[0] +
      "</s>\nUser: The cat\nAssistant:\n";
  EXPECT_NE(r.err.find(second_prompt), std::string::npos) << r.err;
}

TEST_F(ChatCliTest, GreedyReplyEqualsGenerateChat) {
  const RunResult chat =
      run("Once upon a time\n", "chat " + model() + " --temperature 0 --max-tokens 40");
  const RunResult gen = run("", "generate " + model() +
                                    " --chat --prompt 'Once upon a time' --temperature 0 "
                                    "--max-tokens 40");
  ASSERT_EQ(chat.rc, 0) << chat.err;
  ASSERT_EQ(gen.rc, 0) << gen.err;
  EXPECT_EQ(chat.out, gen.out + "\n");  // EOF ends the chat; one reply, one line
}

TEST_F(ChatCliTest, SeededRepliesRepeatAndResetForgets) {
  const RunResult r = run("Once upon a time\n/reset\n\nOnce upon a time\n",
                          "chat " + model() +
                              " --temperature 0.9 --top-p 0.95 --seed 11 --max-tokens 30 "
                              "--verbose-prompt");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto replies = lines(r.out);
  ASSERT_EQ(replies.size(), 2u) << r.out;
  EXPECT_EQ(replies[0], replies[1]);  // same seed, same (reset) conversation
  EXPECT_EQ(r.err.find("Assistant: "), std::string::npos) << "reset kept a reply: " << r.err;
}

TEST_F(ChatCliTest, ATurnThatDoesNotFitIsReportedAndTheChatGoesOn) {
  std::string long_line;
  for (int i = 0; i < 700; ++i) long_line += "cat ";
  const RunResult r = run(long_line + "\nOnce upon a time\n",
                          "chat " + model() + " --temperature 0 --max-tokens 8 --verbose-prompt");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("leaves no room in the model's context"), std::string::npos) << r.err;
  EXPECT_EQ(lines(r.out).size(), 1u) << r.out;
  // The failed turn is not part of the conversation.
  EXPECT_NE(r.err.find("<s>User: Once upon a time\nAssistant:\n"), std::string::npos) << r.err;
}

TEST_F(ChatCliTest, ErrorsNameTheProblem) {
  fs::remove(dir_ / "model/chat_template.jinja");
  RunResult r = run("hi\n", "chat " + model());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("no chat template"), std::string::npos) << r.err;
  r = run("", "chat --temperature 0");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--model is required"), std::string::npos) << r.err;
  r = run("", "chat --bogus");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("unknown flag --bogus"), std::string::npos) << r.err;
  std::ofstream(dir_ / "model/chat_template.jinja") << kTemplate;
  r = run("", "chat " + model() + " --top-p 1.5");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("top_p must be in (0, 1], got 1.5"), std::string::npos) << r.err;
  r = run("", "chat " + model() + " --chat-template-kwargs '{\"a\": '");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--chat-template-kwargs must be a JSON object"), std::string::npos) << r.err;
}

}  // namespace
