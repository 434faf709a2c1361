// io/hf_cache: a Hugging Face repo id loads from the hub cache, offline, in huggingface_hub's own
// layout (blobs/ holding the files, snapshots/<commit>/ symlinking to them, refs/<branch>
// naming the commit), as transformers and vLLM find it; and the CLI takes the repo id wherever
// it takes a model directory. The cache here is built by hand from models/stories260K.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "../common/cli.h"
#include "io/hf_cache.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::run_cli;

const std::string kStories = std::string(QS_SOURCE_DIR) + "/models/stories260K";
const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";
const std::string kOldCommit = "fedcba9876543210fedcba9876543210fedcba98";

// Restores an environment variable on scope exit.
class EnvVar {
 public:
  EnvVar(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~EnvVar() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

class HfCache : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "qs_hfcache_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    // models--local--stories260K: main -> kCommit, tag v0 -> kOldCommit (the same files).
    repo_ = fs::path(dir_) / "hub" / "models--local--stories260K";
    fs::create_directories(repo_ / "blobs");
    fs::create_directories(repo_ / "refs");
    for (const std::string& commit : {kCommit, kOldCommit}) {
      fs::create_directories(repo_ / "snapshots" / commit);
    }
    int n = 0;
    for (const auto& entry : fs::directory_iterator(kStories)) {
      if (!entry.is_regular_file()) continue;
      const std::string blob = "blob" + std::to_string(n++);
      fs::copy_file(entry.path(), repo_ / "blobs" / blob);
      for (const std::string& commit : {kCommit, kOldCommit}) {
        fs::create_symlink(fs::path("../../blobs") / blob,
                           repo_ / "snapshots" / commit / entry.path().filename());
      }
    }
    std::ofstream(repo_ / "refs" / "main") << kCommit;  // no newline, as the hub writes it
    std::ofstream(repo_ / "refs" / "v0") << kOldCommit << "\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string hub() const { return dir_ + "/hub"; }
  std::string dir_;
  fs::path repo_;
};

TEST_F(HfCache, CacheDirectoryFollowsHuggingfaceHub) {
  EnvVar a("HF_HUB_CACHE", "/x/hub"), b("HF_HOME", "/y"), c("XDG_CACHE_HOME", "/z");
  EXPECT_EQ(io::hf_hub_cache_dir(), "/x/hub");
  {
    EnvVar none("HF_HUB_CACHE", nullptr);
    EXPECT_EQ(io::hf_hub_cache_dir(), "/y/hub");
    EnvVar none2("HF_HOME", nullptr);
    EXPECT_EQ(io::hf_hub_cache_dir(), "/z/huggingface/hub");
    EnvVar none3("XDG_CACHE_HOME", nullptr), home("HOME", "/home/u");
    EXPECT_EQ(io::hf_hub_cache_dir(), "/home/u/.cache/huggingface/hub");
  }
}

TEST_F(HfCache, RepoIdShape) {
  EXPECT_TRUE(io::looks_like_repo_id("Qwen/Qwen2.5-0.5B-Instruct"));
  EXPECT_TRUE(io::looks_like_repo_id("vllm-project-org/FLUX.1-dev-AutoRound-w4a16"));
  EXPECT_FALSE(io::looks_like_repo_id("Qwen2.5"));
  EXPECT_FALSE(io::looks_like_repo_id("/abs/path"));
  EXPECT_FALSE(io::looks_like_repo_id("a/b/c"));
  EXPECT_FALSE(io::looks_like_repo_id("../x"));
  EXPECT_FALSE(io::looks_like_repo_id("a/.."));
  EXPECT_FALSE(io::looks_like_repo_id("a b/c"));
}

TEST_F(HfCache, ResolvesBranchTagAndCommit) {
  EnvVar cache("HF_HUB_CACHE", hub().c_str());
  auto main = io::resolve_model_dir("local/stories260K");
  ASSERT_TRUE(main.ok()) << main.status().message();
  EXPECT_EQ(fs::path(*main), repo_ / "snapshots" / kCommit);
  auto tag = io::resolve_model_dir("local/stories260K", "v0");
  ASSERT_TRUE(tag.ok()) << tag.status().message();
  EXPECT_EQ(fs::path(*tag), repo_ / "snapshots" / kOldCommit);
  auto commit = io::resolve_model_dir("local/stories260K", kOldCommit);
  ASSERT_TRUE(commit.ok()) << commit.status().message();
  EXPECT_EQ(fs::path(*commit), repo_ / "snapshots" / kOldCommit);
  // A local directory wins and is returned as given.
  EXPECT_EQ(*io::resolve_model_dir(kStories), kStories);
}

TEST_F(HfCache, MissingRepoOrRevisionSaysWhereItLooked) {
  EnvVar cache("HF_HUB_CACHE", hub().c_str());
  auto repo = io::resolve_model_dir("Qwen/Qwen2.5-0.5B-Instruct");
  ASSERT_FALSE(repo.ok());
  EXPECT_NE(repo.status().message().find(hub() + "/models--Qwen--Qwen2.5-0.5B-Instruct"),
            std::string::npos)
      << repo.status().message();
  EXPECT_NE(repo.status().message().find("does not download"), std::string::npos);
  auto rev = io::resolve_model_dir("local/stories260K", "v9");
  ASSERT_FALSE(rev.ok());
  EXPECT_NE(rev.status().message().find("revision \"v9\""), std::string::npos)
      << rev.status().message();
  auto gone =
      io::resolve_model_dir("local/stories260K", "1111111111111111111111111111111111111111");
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.status().message().find("no snapshot"), std::string::npos);
  auto neither = io::resolve_model_dir("/no/such/dir");
  ASSERT_FALSE(neither.ok());
  EXPECT_NE(neither.status().message().find("no such directory"), std::string::npos);
}

// generate, inspect and quantize take the repo id where they take a directory.
TEST_F(HfCache, CliTakesTheRepoId) {
  EnvVar cache("HF_HUB_CACHE", hub().c_str());
  const std::string gen = " --prompt \"Once upon a time\" --max-tokens 24 --temperature 0";
  CliResult by_dir = run_cli("generate --model " + kStories + gen, false);
  CliResult by_id = run_cli("generate --model local/stories260K" + gen, false);
  ASSERT_EQ(by_dir.exit_code, 0) << by_dir.output;
  ASSERT_EQ(by_id.exit_code, 0) << by_id.output;
  EXPECT_EQ(by_id.output, by_dir.output);
  CliResult tag = run_cli("generate --model local/stories260K --revision v0" + gen, false);
  EXPECT_EQ(tag.exit_code, 0) << tag.output;
  EXPECT_EQ(tag.output, by_dir.output);
  CliResult inspect = run_cli("inspect local/stories260K");
  EXPECT_EQ(inspect.exit_code, 0) << inspect.output;
  CliResult quant = run_cli("quantize --model local/stories260K --output_dir " + dir_ +
                            "/q --iters 0 --disable_opt_rtn --group_size 32");
  EXPECT_EQ(quant.exit_code, 0) << quant.output;
  CliResult missing = run_cli("generate --model nobody/nothing" + gen);
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find("models--nobody--nothing"), std::string::npos) << missing.output;
}

}  // namespace
}  // namespace qs
