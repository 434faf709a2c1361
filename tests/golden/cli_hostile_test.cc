// golden: the command line under hostile use (issue 9), on the in-tree quantized fixture (no
// ../shared/data needed): out-of-range numbers say so, a failed write to stdout fails the
// command, --max-tokens past the context is reported as cut, the prompt can come from a file or
// stdin, and malformed files (samples of what the fuzzers produced) give an error that names
// the file and the problem, with a non-zero exit and no crash.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "../common/cli.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

const std::string kModel =
    std::string(QS_SOURCE_DIR) + "/tests/golden/fixtures/quant/llama_gptq_w4g128";

std::string generate(const std::string& flags) {
  return "generate --model " + kModel + " --temperature 0 --threads 1 " + flags;
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

class CliHostile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "qs_cli_hostile_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A copy of the fixture with `name` replaced by `contents`.
  std::string broken_copy(const std::string& name, const std::string& contents) {
    const std::string out = dir_ + "/broken_" + std::to_string(n_++);
    fs::copy(kModel, out);
    std::ofstream(out + "/" + name, std::ios::binary | std::ios::trunc) << contents;
    return out;
  }
  std::string dir_;
  int n_ = 0;
};

TEST_F(CliHostile, NumberFlagsOutOfRangeSaySo) {
  auto r = run_cli(generate("--prompt hi --max-tokens 99999999999"));
  EXPECT_GT(r.exit_code, 0);
  EXPECT_TRUE(has(r.output, "--max-tokens must be in [1, 2147483647], got 99999999999"))
      << r.output;
  r = run_cli(generate("--prompt hi --max-tokens 99999999999999999999999"));
  EXPECT_GT(r.exit_code, 0);
  EXPECT_TRUE(has(r.output, "--max-tokens is out of range")) << r.output;
  r = run_cli(generate("--prompt hi --max-tokens 0"));
  EXPECT_GT(r.exit_code, 0);
  EXPECT_TRUE(has(r.output, "must be in [1, 2147483647], got 0")) << r.output;
}

TEST_F(CliHostile, FailedWriteToStdoutFailsTheCommand) {
  const std::string bin = QS_BINARY, err = dir_ + "/err";
  const std::string cmd = bin + " " + generate("--prompt 'Once upon' --max-tokens 4");
  int status = std::system((cmd + " > /dev/full 2> " + err).c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_TRUE(has(testing::slurp(err), "cannot write to stdout")) << testing::slurp(err);
  // A reader that has gone away: the command must not report success. (A reader that left
  // after one byte raced the generator: 200 tokens of stories260K fit the pipe's buffer, and
  // were sometimes all written before the reader left.) `head -c 0` leaves at once, and the
  // command starts after it has.
  const std::string rc = dir_ + "/rc";
  status = std::system(("{ sleep 0.3; " + cmd +
                        " --max-tokens 200 --ignore-eos 2>/dev/null; echo $? > " + rc +
                        "; } | head -c 0 > /dev/null")
                           .c_str());
  EXPECT_NE(std::stoi(testing::slurp(rc)), 0);
}

TEST_F(CliHostile, MaxTokensPastTheContextIsReportedAsCut) {
  auto r = run_cli(generate("--prompt 'Once upon a time' --max-tokens 100000 --ignore-eos"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "--max-tokens 100000 cut to ")) << r.output;
  EXPECT_TRUE(has(r.output, "model's context of 256")) << r.output;
}

TEST_F(CliHostile, PromptFromFileOrStdin) {
  std::ofstream(dir_ + "/prompt.txt") << "Once upon a time";
  const auto inline_prompt = run_cli(generate("--prompt 'Once upon a time' --max-tokens 5"), false);
  const auto from_file =
      run_cli(generate("--prompt-file " + dir_ + "/prompt.txt --max-tokens 5"), false);
  const auto from_stdin = run_cli(
      "generate --model " + kModel +
          " --temperature 0 --threads 1 --prompt-file - --max-tokens 5 < " + dir_ + "/prompt.txt",
      false);
  ASSERT_EQ(inline_prompt.exit_code, 0);
  EXPECT_EQ(from_file.exit_code, 0);
  EXPECT_EQ(from_stdin.exit_code, 0);
  EXPECT_EQ(from_file.output, inline_prompt.output);
  EXPECT_EQ(from_stdin.output, inline_prompt.output);
  auto r = run_cli(generate("--prompt-file " + dir_ + "/missing.txt"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.output, dir_ + "/missing.txt")) << r.output;
  r = run_cli(generate("--prompt x --prompt-file " + dir_ + "/prompt.txt"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(has(r.output, "not both")) << r.output;
}

TEST_F(CliHostile, MalformedFilesNameTheFileAndTheProblem) {
  struct Case {
    const char* file;
    std::string contents;
    const char* expected;
  };
  const Case cases[] = {
      {"config.json", R"({"architectures":["LlamaForCausalLM"],"vocab_size":256,
        "hidden_size":128,"intermediate_size":384,"num_hidden_layers":99999999,
        "num_attention_heads":4})",
       "num_hidden_layers' is 99999999, above the limit of 1024"},
      {"config.json", "{\"architectures\":[", "config.json"},
      {"model.safetensors", std::string("\x10\0\0\0\0\0\0\0{\"a\":{}}", 16), "model.safetensors"},
      {"model.safetensors", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8),
       "exceeds the 100 MB limit"},
      {"tokenizer.json", R"({"model":{"type":"BPE","vocab":{"a":4294967296},"merges":[]}})",
       "tokenizer.json"},
      {"generation_config.json", R"({"eos_token_id": 1e999})", "generation_config.json"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file + std::string(": ") + c.contents);
    const std::string model = broken_copy(c.file, c.contents);
    const auto r = run_cli("generate --model " + model + " --prompt hi --max-tokens 2 --threads 1");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(has(r.output, c.expected)) << r.output;
    EXPECT_TRUE(has(r.output, "quantserve generate: ")) << r.output;
  }
}

}  // namespace
}  // namespace qs
