// Unit tests for Checkpoint::open on single-file and sharded directories built in a temp dir:
// the happy paths, and each way an index and its shards can disagree, which must be an error
// naming the file and the tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "core/json.h"
#include "io/checkpoint.h"

namespace qs::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "qs_ckpt_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  // Writes a shard holding F32 tensors of the given names; tensor i is [i+1, 2] filled with i.
  void write_shard(const std::string& file, const std::vector<std::string>& names,
                   const std::map<std::string, std::string>& meta = {}) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (size_t i = 0; i < names.size(); ++i) {
      const int64_t rows = static_cast<int64_t>(i) + 1;
      tensors.emplace_back(names[i],
                           Tensor::from_f32(DType::kF32, {rows, 2},
                                            std::vector<float>(rows * 2, static_cast<float>(i))));
    }
    ASSERT_TRUE(write_safetensors(path(file), tensors, meta).ok());
  }

  void write_index(const json& weight_map) {
    json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
    ASSERT_TRUE(write_json(path("model.safetensors.index.json"), index).ok());
  }

  std::string open_error() {
    auto c = Checkpoint::open(dir_);
    return c.ok() ? "" : c.status().message();
  }

  std::string dir_;
};

TEST_F(CheckpointTest, SingleFile) {
  write_shard("model.safetensors", {"a", "b"}, {{"format", "pt"}});
  auto c = Checkpoint::open(dir_);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(c->has("b"));
  EXPECT_FALSE(c->has("c"));
  EXPECT_EQ(c->file_of("a"), "model.safetensors");
  EXPECT_EQ(c->file_of("zzz"), "");
  EXPECT_EQ(c->metadata().at("format"), "pt");
  auto b = c->get("b", {2, 2});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->to_f32(), (std::vector<float>{1, 1, 1, 1}));
}

TEST_F(CheckpointTest, GetErrors) {
  write_shard("model.safetensors", {"a", "b"});
  auto c = Checkpoint::open(dir_);
  ASSERT_TRUE(c.ok());
  auto missing = c->get("model.norm.weight");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), dir_ + ": tensor 'model.norm.weight' not found");
  auto wrong = c->get("b", {2, 3});
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().message(),
            path("model.safetensors") + ": tensor 'b' has shape [2, 2], expected [2, 3]");
}

TEST_F(CheckpointTest, Sharded) {
  write_shard("model-00001-of-00002.safetensors", {"x", "y"}, {{"format", "pt"}});
  write_shard("model-00002-of-00002.safetensors", {"z"});
  write_index({{"x", "model-00001-of-00002.safetensors"},
               {"y", "model-00001-of-00002.safetensors"},
               {"z", "model-00002-of-00002.safetensors"}});
  auto c = Checkpoint::open(dir_);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->names(), (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(c->file_of("y"), "model-00001-of-00002.safetensors");
  EXPECT_EQ(c->file_of("z"), "model-00002-of-00002.safetensors");
  EXPECT_EQ(c->metadata().at("format"), "pt");
  auto z = c->get("z", {1, 2});
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z->to_f32(), (std::vector<float>{0, 0}));
  auto wrong = c->get("z", {2});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("model-00002-of-00002.safetensors: tensor 'z' has "
                                          "shape [1, 2], expected [2]"),
            std::string::npos)
      << wrong.status().message();
}

TEST_F(CheckpointTest, IndexTakesPrecedenceOverSingleFile) {
  write_shard("model.safetensors", {"stale"});
  write_shard("s1.safetensors", {"fresh"});
  write_index({{"fresh", "s1.safetensors"}});
  auto c = Checkpoint::open(dir_);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->names(), (std::vector<std::string>{"fresh"}));
}

TEST_F(CheckpointTest, NoCheckpoint) {
  EXPECT_NE(open_error().find("neither model.safetensors nor model.safetensors.index.json"),
            std::string::npos);
  auto c = Checkpoint::open(path("does-not-exist"));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
}

TEST_F(CheckpointTest, IndexNamesMissingShard) {
  write_shard("s1.safetensors", {"x"});
  write_index({{"x", "s1.safetensors"}, {"y", "s2.safetensors"}});
  const std::string msg = open_error();
  EXPECT_NE(msg.find("names shard s2.safetensors (for tensor 'y'), but " + path("s2.safetensors") +
                     " does not exist"),
            std::string::npos)
      << msg;
}

TEST_F(CheckpointTest, IndexNamesTensorAbsentFromShard) {
  write_shard("s1.safetensors", {"x"});
  write_index({{"x", "s1.safetensors"}, {"ghost", "s1.safetensors"}});
  const std::string msg = open_error();
  EXPECT_NE(msg.find("places tensor 'ghost' in s1.safetensors, but " + path("s1.safetensors") +
                     " does not contain it"),
            std::string::npos)
      << msg;
}

TEST_F(CheckpointTest, DuplicateTensorAcrossShards) {
  write_shard("s1.safetensors", {"x", "dup"});
  write_shard("s2.safetensors", {"dup"});
  write_index({{"x", "s1.safetensors"}, {"dup", "s2.safetensors"}});
  const std::string msg = open_error();
  EXPECT_NE(msg.find("tensor 'dup' is stored in both s1.safetensors and s2.safetensors"),
            std::string::npos)
      << msg;
}

TEST_F(CheckpointTest, MalformedIndex) {
  write_shard("s1.safetensors", {"x"});
  write_index({{"x", 3}});
  EXPECT_NE(open_error().find("weight_map entry for tensor 'x' must be a file name"),
            std::string::npos);
  write_index({{"x", "../outside.safetensors"}});
  EXPECT_NE(open_error().find("must be a file name inside the checkpoint"), std::string::npos);
  write_index(json::object());
  EXPECT_NE(open_error().find("'weight_map' is empty"), std::string::npos);
  ASSERT_TRUE(write_json(path("model.safetensors.index.json"), json::array()).ok());
  EXPECT_NE(open_error().find("missing 'weight_map' object"), std::string::npos);
  ASSERT_TRUE(
      write_file(path("model.safetensors.index.json"), "{\n  \"weight_map\": nope\n}").ok());
  EXPECT_NE(open_error().find("model.safetensors.index.json:2:18: invalid JSON"), std::string::npos)
      << open_error();
}

TEST_F(CheckpointTest, CorruptShardErrorNamesShard) {
  ASSERT_TRUE(write_file(path("s1.safetensors"), "garbage!").ok());
  write_index({{"x", "s1.safetensors"}});
  const std::string msg = open_error();
  EXPECT_EQ(msg.find(path("s1.safetensors") + ": "), 0u) << msg;
}

TEST_F(CheckpointTest, WriteCheckpointShardsLikeSavePretrained) {
  // 5 tensors of 8, 8, 20, 4, 8 bytes with a 16-byte limit: [a b] [c] [d e].
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, n] : std::vector<std::pair<std::string, int64_t>>{
           {"a", 2}, {"b", 2}, {"c", 5}, {"d", 1}, {"e", 2}}) {
    tensors.emplace_back(name, Tensor::from_f32(DType::kF32, {n}, std::vector<float>(n, 1.0f)));
  }
  ASSERT_TRUE(write_checkpoint(dir_, tensors, {{"format", "pt"}}, 16).ok());
  auto index = read_json(path("model.safetensors.index.json"));
  ASSERT_TRUE(index.ok());
  EXPECT_EQ((*index)["metadata"]["total_size"], 48);
  EXPECT_EQ((*index)["weight_map"], json({{"a", "model-00001-of-00003.safetensors"},
                                          {"b", "model-00001-of-00003.safetensors"},
                                          {"c", "model-00002-of-00003.safetensors"},
                                          {"d", "model-00003-of-00003.safetensors"},
                                          {"e", "model-00003-of-00003.safetensors"}}));
  auto c = Checkpoint::open(dir_);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->names().size(), 5u);
  EXPECT_EQ(c->metadata().at("format"), "pt");
  auto t = c->get("c", {5});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->to_f32(), std::vector<float>(5, 1.0f));

  // Saving again as one file removes the shards and the index; unrelated files stay.
  ASSERT_TRUE(write_file(path("config.json"), "{}").ok());
  ASSERT_TRUE(write_checkpoint(dir_, tensors).ok());
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir_)) files.push_back(e.path().filename());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"config.json", "model.safetensors"}));
  EXPECT_TRUE(Checkpoint::open(dir_).ok());

  // Bad input is refused before anything in the directory changes.
  tensors.push_back(tensors.front());
  Status s = write_checkpoint(dir_, tensors, {}, 16);
  EXPECT_NE(s.message().find("tensor name 'a' is reserved or given twice"), std::string::npos)
      << s.message();
  EXPECT_TRUE(fs::exists(path("model.safetensors")));
  EXPECT_FALSE(write_checkpoint(path("missing"), {}).ok());
}

}  // namespace
}  // namespace qs::io
