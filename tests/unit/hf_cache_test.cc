// io/hf_cache: repo ids resolved offline in a hub cache laid out as huggingface_hub lays it out
// (blobs/ holding the files, snapshots/<commit>/ of relative symlinks into blobs/, refs/<name>
// holding a commit with no newline), built here in a temp dir: where the cache is found under
// each environment variable, branches, tags, pull-request refs and commits, every way the
// lookup can fail (each a message naming what it looked at), local paths winning over
// names, and a sharded checkpoint loading through the snapshot's symlinks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/mmap_file.h"
#include "io/checkpoint.h"
#include "io/hf_cache.h"

namespace qs::io {
namespace {

namespace fs = std::filesystem;

const std::string kMain = "0123456789abcdef0123456789abcdef01234567";
const std::string kTag = "fedcba9876543210fedcba9876543210fedcba98";
const std::string kPr = "aaaaaaaaaabbbbbbbbbbccccccccccdddddddddd";
const std::string kNoSnapshot = "1111111111111111111111111111111111111111";

// Sets (or, with nullptr, unsets) an environment variable, restoring it on scope exit.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = std::string(old);
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Every variable the cache location depends on, unset for the test's scope.
struct NoCacheEnv {
  ScopedEnv hub{"HF_HUB_CACHE", nullptr};
  ScopedEnv legacy{"HUGGINGFACE_HUB_CACHE", nullptr};
  ScopedEnv home{"HF_HOME", nullptr};
  ScopedEnv xdg{"XDG_CACHE_HOME", nullptr};
};

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

std::string message_of(const Result<std::string>& r) {
  return r.ok() ? "ok: " + *r : r.status().message();
}

class HfCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "qs_hf_cache_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    tmp_ = tmpl;
    make_source_model();
    // The same files at three commits: main, the tag v1.0 and the pull request refs/pr/1.
    add_repo(tmp_ / "hub", "tiny-org/tiny-model",
             {{"main", kMain}, {"v1.0", kTag}, {"refs/pr/1", kPr}});
  }
  void TearDown() override { fs::remove_all(tmp_); }

  // A sharded checkpoint (two shards and an index, as save_pretrained writes past its shard
  // size), a config and a tokenizer in a subfolder.
  void make_source_model() {
    source_ = tmp_ / "source";
    fs::create_directories(source_);
    std::vector<std::pair<std::string, Tensor>> tensors;
    tensors.emplace_back("a", Tensor::from_f32(DType::kF32, {2, 2}, {1, 2, 3, 4}));
    tensors.emplace_back("b", Tensor::from_f32(DType::kF32, {3}, {5, 6, 7}));
    ASSERT_TRUE(write_checkpoint(source_.string(), tensors, {{"format", "pt"}}, 16).ok());
    ASSERT_TRUE(fs::exists(source_ / "model.safetensors.index.json"));
    write_text(source_ / "config.json", R"({"model_type": "llama"})");
    write_text(source_ / "tokenizer" / "tokenizer.json", R"({"version": "1.0"})");
  }

  // models--owner--name with one blob per source file and, per ref, refs/<ref> naming the
  // commit and snapshots/<commit>/ linking each file to its blob by a relative path.
  fs::path add_repo(const fs::path& hub, const std::string& repo_id,
                    const std::map<std::string, std::string>& refs) {
    std::string folder = repo_id;
    folder.replace(folder.find('/'), 1, "--");
    const fs::path repo = hub / ("models--" + folder);
    fs::create_directories(repo / "blobs");
    int n = 0;
    for (const auto& e : fs::recursive_directory_iterator(source_)) {
      if (!e.is_regular_file()) continue;
      const fs::path rel = fs::relative(e.path(), source_);
      const std::string blob = "etag" + std::to_string(n++);
      fs::copy_file(e.path(), repo / "blobs" / blob);
      for (const auto& [ref, commit] : refs) {
        const fs::path link = repo / "snapshots" / commit / rel;
        fs::create_directories(link.parent_path());
        // From snapshots/<commit>/<dirs>/ back to the repo folder, then into blobs/.
        fs::path up = "..";
        for (auto it = rel.begin(); it != rel.end(); ++it) up /= "..";
        fs::create_symlink(up / "blobs" / blob, link);
      }
    }
    for (const auto& [ref, commit] : refs) write_text(repo / "refs" / ref, commit);
    return repo;
  }

  std::string hub() const { return (tmp_ / "hub").string(); }
  fs::path repo() const { return tmp_ / "hub" / "models--tiny-org--tiny-model"; }
  fs::path snapshot(const std::string& commit) const { return repo() / "snapshots" / commit; }

  fs::path tmp_;
  fs::path source_;
};

TEST_F(HfCacheTest, CacheDirectoryInHuggingfaceHubsOrder) {
  NoCacheEnv clean;
  ScopedEnv home("HOME", "/home/u");
  EXPECT_EQ(hf_hub_cache_dir(), "/home/u/.cache/huggingface/hub");
  ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
  EXPECT_EQ(hf_hub_cache_dir(), "/xdg/huggingface/hub");
  ScopedEnv hf_home("HF_HOME", "/hf");
  EXPECT_EQ(hf_hub_cache_dir(), "/hf/hub");
  ScopedEnv legacy("HUGGINGFACE_HUB_CACHE", "/legacy");
  EXPECT_EQ(hf_hub_cache_dir(), "/legacy");
  ScopedEnv hub_cache("HF_HUB_CACHE", "/hub-cache");
  EXPECT_EQ(hf_hub_cache_dir(), "/hub-cache");
}

TEST_F(HfCacheTest, TildeIsHomeAndEmptyVariablesCountAsUnset) {
  NoCacheEnv clean;
  ScopedEnv home("HOME", "/home/u");
  ScopedEnv hf_home("HF_HOME", "~/hf");
  EXPECT_EQ(hf_hub_cache_dir(), "/home/u/hf/hub");
  ScopedEnv hub_cache("HF_HUB_CACHE", "");
  EXPECT_EQ(hf_hub_cache_dir(), "/home/u/hf/hub");
  ScopedEnv hub_cache2("HF_HUB_CACHE", "~");
  EXPECT_EQ(hf_hub_cache_dir(), "/home/u");
}

// Each variable, set alone, is where a repo id is found.
TEST_F(HfCacheTest, ResolvesUnderEachVariable) {
  NoCacheEnv clean;
  const std::string expected = snapshot(kMain).string();
  {
    ScopedEnv v("HF_HUB_CACHE", hub().c_str());
    EXPECT_EQ(message_of(resolve_model_dir("tiny-org/tiny-model")), "ok: " + expected);
  }
  {
    ScopedEnv v("HUGGINGFACE_HUB_CACHE", hub().c_str());
    EXPECT_EQ(message_of(resolve_model_dir("tiny-org/tiny-model")), "ok: " + expected);
  }
  {
    ScopedEnv v("HF_HOME", tmp_.c_str());  // $HF_HOME/hub
    EXPECT_EQ(message_of(resolve_model_dir("tiny-org/tiny-model")), "ok: " + expected);
  }
  {
    fs::create_directories(tmp_ / "xdg" / "huggingface");
    fs::create_directory_symlink(tmp_ / "hub", tmp_ / "xdg" / "huggingface" / "hub");
    ScopedEnv v("XDG_CACHE_HOME", (tmp_ / "xdg").c_str());
    auto r = resolve_model_dir("tiny-org/tiny-model");
    EXPECT_EQ(message_of(r), "ok: " + (tmp_ /
                                       "xdg/huggingface/hub/models--tiny-org--tiny-model/"
                                       "snapshots" /
                                       kMain)
                                          .string());
  }
  {
    fs::create_directories(tmp_ / "home" / ".cache" / "huggingface");
    fs::create_directory_symlink(tmp_ / "hub", tmp_ / "home/.cache/huggingface/hub");
    ScopedEnv v("HOME", (tmp_ / "home").c_str());
    EXPECT_TRUE(resolve_model_dir("tiny-org/tiny-model").ok());
  }
  // HF_HUB_CACHE wins over HF_HOME even when HF_HOME's cache has the repo.
  ScopedEnv hf_home("HF_HOME", tmp_.c_str());
  ScopedEnv empty("HF_HUB_CACHE", (tmp_ / "empty").c_str());
  EXPECT_FALSE(resolve_model_dir("tiny-org/tiny-model").ok());
}

TEST_F(HfCacheTest, RepoIdShape) {
  for (const char* ok :
       {"Qwen/Qwen2.5-0.5B-Instruct", "vllm-project-org/FLUX.1-dev-AutoRound-w4a16", "a/b", "_x/y_",
        "org.name/model.v2"}) {
    EXPECT_TRUE(looks_like_repo_id(ok)) << ok;
  }
  for (const char* bad :
       {"Qwen2.5", "/abs/path", "a/b/c", "../x", "a/..", "./x", "a b/c", "org/-model", "org/model-",
        ".org/model", "a--b/c", "a/b--c", "org/model.git", "a/", "/a", "", "org/m\xc3\xa9"}) {
    EXPECT_FALSE(looks_like_repo_id(bad)) << bad;
  }
  EXPECT_TRUE(looks_like_repo_id("o/" + std::string(96, 'm')));
  EXPECT_FALSE(looks_like_repo_id("o/" + std::string(97, 'm')));
}

TEST_F(HfCacheTest, RevisionByBranchTagPullRequestAndCommit) {
  ScopedEnv cache("HF_HUB_CACHE", hub().c_str());
  EXPECT_EQ(message_of(resolve_model_dir("tiny-org/tiny-model")),
            "ok: " + snapshot(kMain).string());
  EXPECT_EQ(message_of(resolve_model_dir("tiny-org/tiny-model", "main")),
            "ok: " + snapshot(kMain).string());
  EXPECT_EQ(message_of(resolve_model_dir("tiny-org/tiny-model", "v1.0")),
            "ok: " + snapshot(kTag).string());
  EXPECT_EQ(message_of(resolve_model_dir("tiny-org/tiny-model", "refs/pr/1")),
            "ok: " + snapshot(kPr).string());
  // A commit hash names its snapshot directly, with or without a ref pointing at it.
  EXPECT_EQ(message_of(resolve_model_dir("tiny-org/tiny-model", kTag)),
            "ok: " + snapshot(kTag).string());
  // A ref file edited by hand may end in a newline.
  write_text(repo() / "refs" / "edited", kTag + "\n");
  EXPECT_EQ(message_of(resolve_model_dir("tiny-org/tiny-model", "edited")),
            "ok: " + snapshot(kTag).string());
}

TEST_F(HfCacheTest, MissingRepoSaysWhereItLookedAndHowToFetch) {
  ScopedEnv cache("HF_HUB_CACHE", hub().c_str());
  const std::string m = message_of(resolve_model_dir("Qwen/Qwen2.5-0.5B-Instruct"));
  EXPECT_NE(m.find("./Qwen/Qwen2.5-0.5B-Instruct"), std::string::npos) << m;
  EXPECT_NE(m.find(hub() + "/models--Qwen--Qwen2.5-0.5B-Instruct"), std::string::npos) << m;
  EXPECT_NE(m.find("$HF_HUB_CACHE"), std::string::npos) << m;
  EXPECT_NE(m.find("does not download"), std::string::npos) << m;
  EXPECT_NE(m.find("hf download Qwen/Qwen2.5-0.5B-Instruct"), std::string::npos) << m;
  // Under a revision the hint carries it.
  const std::string r = message_of(resolve_model_dir("Qwen/Qwen2.5-0.5B-Instruct", "v2"));
  EXPECT_NE(r.find("hf download Qwen/Qwen2.5-0.5B-Instruct --revision v2"), std::string::npos) << r;
}

TEST_F(HfCacheTest, MissingRefNamesTheRefFileAndTheRefsThere) {
  ScopedEnv cache("HF_HUB_CACHE", hub().c_str());
  auto r = resolve_model_dir("tiny-org/tiny-model", "v9");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  const std::string m = r.status().message();
  EXPECT_NE(m.find("revision \"v9\""), std::string::npos) << m;
  EXPECT_NE(m.find((repo() / "refs" / "v9").string()), std::string::npos) << m;
  EXPECT_NE(m.find("main"), std::string::npos) << m;
  EXPECT_NE(m.find("v1.0"), std::string::npos) << m;
  EXPECT_NE(m.find("hf download tiny-org/tiny-model --revision v9"), std::string::npos) << m;
  // No refs/main at all: a repo downloaded at a commit only.
  fs::remove(repo() / "refs" / "main");
  const std::string no_main = message_of(resolve_model_dir("tiny-org/tiny-model"));
  EXPECT_NE(no_main.find((repo() / "refs" / "main").string()), std::string::npos) << no_main;
}

TEST_F(HfCacheTest, MissingSnapshotNamesItAndTheRefThatLedThere) {
  ScopedEnv cache("HF_HUB_CACHE", hub().c_str());
  // A commit given directly with no snapshot of it.
  const std::string by_hash = message_of(resolve_model_dir("tiny-org/tiny-model", kNoSnapshot));
  EXPECT_NE(by_hash.find("no snapshot " + snapshot(kNoSnapshot).string()), std::string::npos)
      << by_hash;
  // A ref naming a commit whose snapshot was deleted (an interrupted or pruned download).
  write_text(repo() / "refs" / "main", kNoSnapshot);
  const std::string by_ref = message_of(resolve_model_dir("tiny-org/tiny-model"));
  EXPECT_NE(by_ref.find("no snapshot " + snapshot(kNoSnapshot).string()), std::string::npos)
      << by_ref;
  EXPECT_NE(by_ref.find((repo() / "refs" / "main").string() + " names " + kNoSnapshot),
            std::string::npos)
      << by_ref;
}

TEST_F(HfCacheTest, CorruptRefAndEscapingRevisionAreErrors) {
  ScopedEnv cache("HF_HUB_CACHE", hub().c_str());
  write_text(repo() / "refs" / "main", "not a hash");
  auto corrupt = resolve_model_dir("tiny-org/tiny-model");
  ASSERT_FALSE(corrupt.ok());
  EXPECT_EQ(corrupt.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(corrupt.status().message().find("'not a hash', not a 40-hex commit hash"),
            std::string::npos)
      << corrupt.status().message();
  // A revision is a path under refs/ and may not leave it (refs/../../<something>).
  write_text(repo() / "outside", kMain);
  for (const char* rev : {"../outside", "/etc/passwd", "a/../../outside", "."}) {
    auto r = resolve_model_dir("tiny-org/tiny-model", rev);
    ASSERT_FALSE(r.ok()) << rev;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << rev;
  }
}

TEST_F(HfCacheTest, LocalPathsWinOverCacheNames) {
  ScopedEnv cache("HF_HUB_CACHE", hub().c_str());
  const fs::path cwd = fs::current_path();
  fs::create_directories(tmp_ / "work" / "tiny-org" / "tiny-model");
  write_text(tmp_ / "work" / "tiny-org" / "file", "x");
  fs::current_path(tmp_ / "work");
  // A relative directory spelled like the repo id is taken as it is, not looked up.
  auto local = resolve_model_dir("tiny-org/tiny-model");
  auto file = resolve_model_path("tiny-org/file");
  auto file_as_dir = resolve_model_dir("tiny-org/file");
  fs::current_path(cwd);
  EXPECT_EQ(message_of(local), "ok: tiny-org/tiny-model");
  // A file is returned to a caller that takes files; one that loads a directory says why not.
  EXPECT_EQ(message_of(file), "ok: tiny-org/file");
  ASSERT_FALSE(file_as_dir.ok());
  EXPECT_NE(file_as_dir.status().message().find("is a file; expected a model directory"),
            std::string::npos)
      << file_as_dir.status().message();
  // Absolute paths too; neither a path nor a repo id is an error saying both.
  EXPECT_EQ(message_of(resolve_model_dir(source_.string())), "ok: " + source_.string());
  const std::string neither = message_of(resolve_model_dir((tmp_ / "missing").string()));
  EXPECT_NE(neither.find("no such file or directory, and not a Hugging Face repo id"),
            std::string::npos)
      << neither;
}

// The snapshot holds symlinks into blobs/: the checkpoint (index and shards), the config and
// a tokenizer in a subfolder read through them as from a plain directory, and a mapping has
// the blob's size, not the link's.
TEST_F(HfCacheTest, SnapshotLoadsThroughItsSymlinks) {
  ScopedEnv cache("HF_HUB_CACHE", hub().c_str());
  auto dir = resolve_model_dir("tiny-org/tiny-model", "v1.0");
  ASSERT_TRUE(dir.ok()) << dir.status().message();
  ASSERT_TRUE(fs::is_symlink(fs::path(*dir) / "config.json"));
  auto ckpt = Checkpoint::open(*dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(ckpt->names(), (std::vector<std::string>{"a", "b"}));
  auto b = ckpt->get("b", {3});
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->to_f32(), (std::vector<float>{5, 6, 7}));
  auto config = read_json(*dir + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ((*config)["model_type"], "llama");
  auto tok = MappedFile::open(*dir + "/tokenizer/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ((*tok)->size(), fs::file_size(source_ / "tokenizer" / "tokenizer.json"));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*tok)->data()), (*tok)->size()),
            R"({"version": "1.0"})");
}

}  // namespace
}  // namespace qs::io
