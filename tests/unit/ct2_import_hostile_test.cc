// unit: io::Ct2Model and importers::import_ct2_whisper on hand-built model.bin files: a tiny
// valid WhisperSpec model imports, and every broken one (bad version, each truncation, a rank,
// dimension or byte count the file cannot back, another spec, a missing or unknown tensor, a
// nonzero key bias, a bad alias or scale) is an error that names the problem.
#include <unistd.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/json.h"
#include "importers/ct2_whisper_import.h"
#include "io/checkpoint.h"
#include "io/ct2_model.h"

namespace qs {
namespace {

namespace fs = std::filesystem;

struct Var {
  std::string name;
  std::vector<uint32_t> shape;
  uint8_t dtype = 0;  // CTranslate2's ids: 0 f32, 1 i8, 2 i16, 4 f16
  std::vector<uint8_t> bytes;
};

// d_model 4, 2 heads, 2 mel bins, ffn 8, vocab 12, 1 + 1 layers, 3 and 5 positions.
constexpr uint32_t kD = 4, kMels = 2, kFfn = 8, kVocab = 12;

Var f32(const std::string& name, std::vector<uint32_t> shape, float salt = 0.25f) {
  Var v{name, shape, 0, {}};
  size_t n = 1;
  for (uint32_t d : shape) n *= d;
  for (size_t i = 0; i < n; ++i) {
    const float x = salt * static_cast<float>((i * 7 + name.size()) % 11) - 1.0f;
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&x);
    v.bytes.insert(v.bytes.end(), p, p + 4);
  }
  return v;
}

Var scalar16(const std::string& name, int16_t x) {
  return {name, {}, 2, {static_cast<uint8_t>(x & 0xff), static_cast<uint8_t>(x >> 8)}};
}
Var flag(const std::string& name, int8_t x) {
  return {name, {}, 1, {static_cast<uint8_t>(x)}};
}

// A fused linear whose part `zero_part` has a zero bias (the key projection).
void linear(std::vector<Var>& vars, const std::string& p, uint32_t rows, uint32_t cols,
            int zero_part = -1, uint32_t parts = 1) {
  vars.push_back(f32(p + "/weight", {parts * rows, cols}));
  Var b = f32(p + "/bias", {parts * rows}, 0.5f);
  if (zero_part >= 0) std::memset(b.bytes.data() + zero_part * rows * 4, 0, rows * 4);
  vars.push_back(b);
}

void layer_norm(std::vector<Var>& vars, const std::string& p) {
  vars.push_back(f32(p + "/gamma", {kD}, 0.3f));
  vars.push_back(f32(p + "/beta", {kD}, 0.1f));
}

std::vector<Var> tiny_whisper() {
  std::vector<Var> v;
  v.push_back(f32("encoder/conv1/weight", {kD, kMels, 3}));
  v.push_back(f32("encoder/conv1/bias", {kD}));
  v.push_back(f32("encoder/conv2/weight", {kD, kD, 3}));
  v.push_back(f32("encoder/conv2/bias", {kD}));
  v.push_back(f32("encoder/position_encodings/encodings", {3, kD}));
  v.push_back(scalar16("encoder/num_heads", 2));
  layer_norm(v, "encoder/layer_norm");
  for (const std::string side : {"encoder", "decoder"}) {
    const std::string l = side + "/layer_0/";
    layer_norm(v, l + "self_attention/layer_norm");
    linear(v, l + "self_attention/linear_0", kD, kD, 1, 3);
    linear(v, l + "self_attention/linear_1", kD, kD);
    if (side == "decoder") {
      layer_norm(v, l + "attention/layer_norm");
      linear(v, l + "attention/linear_0", kD, kD);
      linear(v, l + "attention/linear_1", kD, kD, 0, 2);
      linear(v, l + "attention/linear_2", kD, kD);
    }
    layer_norm(v, l + "ffn/layer_norm");
    linear(v, l + "ffn/linear_0", kFfn, kD);
    linear(v, l + "ffn/linear_1", kD, kFfn);
  }
  v.push_back(f32("decoder/embeddings/weight", {kVocab, kD}));
  v.push_back(f32("decoder/position_encodings/encodings", {5, kD}));
  v.push_back(scalar16("decoder/num_heads", 2));
  v.push_back(flag("decoder/activation", 3));
  v.push_back(flag("decoder/pre_norm", 1));
  v.push_back(flag("decoder/scale_embeddings", 0));
  layer_norm(v, "decoder/layer_norm");
  return v;
}

using Aliases = std::vector<std::pair<std::string, std::string>>;
const Aliases kProjection = {{"decoder/projection/weight", "decoder/embeddings/weight"}};

template <typename T>
void put(std::string& out, T x) {
  out.append(reinterpret_cast<const char*>(&x), sizeof(T));
}
void put_string(std::string& out, const std::string& s) {
  put<uint16_t>(out, static_cast<uint16_t>(s.size() + 1));
  out += s;
  out += '\0';
}

std::string serialize(const std::vector<Var>& vars, const Aliases& aliases = kProjection,
                      const std::string& spec = "WhisperSpec", uint32_t version = 6) {
  std::string out;
  put<uint32_t>(out, version);
  put_string(out, spec);
  put<uint32_t>(out, 3);
  put<uint32_t>(out, static_cast<uint32_t>(vars.size()));
  for (const Var& v : vars) {
    put_string(out, v.name);
    put<uint8_t>(out, static_cast<uint8_t>(v.shape.size()));
    for (uint32_t d : v.shape) put<uint32_t>(out, d);
    put<uint8_t>(out, v.dtype);
    put<uint32_t>(out, static_cast<uint32_t>(v.bytes.size()));
    out.append(v.bytes.begin(), v.bytes.end());
  }
  put<uint32_t>(out, static_cast<uint32_t>(aliases.size()));
  for (const auto& [alias, target] : aliases) {
    put_string(out, alias);
    put_string(out, target);
  }
  return out;
}

// tokenizer.json with only the added tokens the importer reads.
std::string tiny_tokenizer() {
  nlohmann::json added = nlohmann::json::array();
  const char* names[] = {"<|endoftext|>",   "<|startoftranscript|>", "<|en|>",
                         "<|translate|>",   "<|transcribe|>",        "<|startoflm|>",
                         "<|startofprev|>", "<|nocaptions|>",        "<|notimestamps|>"};
  for (int i = 0; i < 9; ++i) {
    added.push_back({{"id", 2 + i}, {"content", names[i]}, {"special", true}});
  }
  return nlohmann::json{{"added_tokens", added}}.dump();
}

class Ct2Hostile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qs_ct2_hostile_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "in");
    write("tokenizer.json", tiny_tokenizer());
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& name, const std::string& bytes) {
    std::ofstream((dir_ / "in" / name).string(), std::ios::binary) << bytes;
  }
  Status import(const std::string& model_bin) {
    write("model.bin", model_bin);
    return importers::import_ct2_whisper((dir_ / "in").string(), (dir_ / "out").string(), {});
  }
  void expect_error(const std::string& model_bin, const std::string& needle) {
    const Status s = import(model_bin);
    ASSERT_FALSE(s.ok()) << "expected an error containing: " << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  }
  fs::path dir_;
};

TEST_F(Ct2Hostile, TinyValidModelImports) {
  const Status s = import(serialize(tiny_whisper()));
  ASSERT_TRUE(s.ok()) << s.to_string();
  auto ckpt = io::Checkpoint::open((dir_ / "out").string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->get("model.encoder.layers.0.self_attn.k_proj.weight")->shape,
            (std::vector<int64_t>{kD, kD}));
  EXPECT_FALSE(ckpt->has("model.encoder.layers.0.self_attn.k_proj.bias"));
  EXPECT_FALSE(ckpt->has("model.decoder.layers.0.encoder_attn.k_proj.bias"));
  EXPECT_TRUE(ckpt->has("model.decoder.layers.0.encoder_attn.v_proj.bias"));
  EXPECT_FALSE(ckpt->has("proj_out.weight"));
  auto config = read_json((dir_ / "out/config.json").string());
  ASSERT_TRUE(config.ok());
  EXPECT_EQ((*config)["max_source_positions"], 3);
  EXPECT_EQ((*config)["max_target_positions"], 5);
  EXPECT_EQ((*config)["decoder_start_token_id"], 3);
  EXPECT_EQ((*config)["encoder_ffn_dim"], kFfn);
  EXPECT_EQ((*config)["torch_dtype"], "float32");
  auto gen = read_json((dir_ / "out/generation_config.json").string());
  ASSERT_TRUE(gen.ok());
  EXPECT_EQ((*gen)["forced_decoder_ids"], nlohmann::json::parse("[[1, 10]]"));
  EXPECT_EQ((*gen)["alignment_heads"], nlohmann::json::parse("[[0, 0], [0, 1]]"));
}

TEST_F(Ct2Hostile, EveryTruncationIsAnError) {
  const std::string full = serialize(tiny_whisper());
  for (size_t n = 0; n < full.size(); n += 1 + n / 64) {
    const Status s = import(full.substr(0, n));
    ASSERT_FALSE(s.ok()) << "prefix of " << n << " bytes";
    EXPECT_NE(s.message().find("truncated"), std::string::npos) << n << ": " << s.message();
  }
  expect_error(full + "x", "1 bytes after the aliases");
}

TEST_F(Ct2Hostile, HeaderAndVariableFieldsAreChecked) {
  const std::vector<Var> vars = tiny_whisper();
  expect_error(serialize(vars, kProjection, "WhisperSpec", 7), "binary version 7");
  expect_error(serialize(vars, kProjection, "WhisperSpec", 3), "binary version 3");
  expect_error(serialize(vars, kProjection, "TransformerSpec"),
               "import ct2 supports Whisper models; this is TransformerSpec");

  std::vector<Var> bad = vars;
  bad[0].bytes.pop_back();
  expect_error(serialize(bad), "'encoder/conv1/weight' [4, 2, 3] F32 holds 95 bytes, expected 96");
  bad = vars;
  bad[0].shape = {0xffffffffu, 0xffffffffu, 0xffffffffu};
  expect_error(serialize(bad), "encoder/conv1/weight");
  bad = vars;
  bad[0].shape.assign(9, 1);
  expect_error(serialize(bad), "rank 9, above the limit of 8");
  bad = vars;
  bad[0].dtype = 9;
  expect_error(serialize(bad), "dtype id 9");
  bad = vars;
  bad.push_back(vars[0]);
  expect_error(serialize(bad), "'encoder/conv1/weight' is stored twice");

  // A name length past the end of the file, and one without its NUL.
  std::string s = serialize(vars);
  const size_t name_len_at = 4 + 2 + 12 + 4 + 4;
  s[name_len_at] = '\xff';
  s[name_len_at + 1] = '\xff';
  expect_error(s, "truncated");
  s = serialize(vars);
  s[name_len_at + 2 + vars[0].name.size()] = 'x';
  expect_error(s, "is not one NUL-terminated string");
}

TEST_F(Ct2Hostile, TensorsMustBeWhatWhisperHas) {
  const std::vector<Var> vars = tiny_whisper();
  std::vector<Var> bad = vars;
  bad.erase(bad.begin() + 2);
  expect_error(serialize(bad), "no variable 'encoder/conv2/weight'");

  bad = vars;
  bad.push_back(f32("decoder/layernorm_embedding/gamma", {kD}));
  expect_error(serialize(bad), "'decoder/layernorm_embedding/gamma' [4] has no place");

  bad = vars;
  for (Var& v : bad) {
    if (v.name == "encoder/layer_0/self_attention/linear_0/bias") v.bytes[kD * 4 + 1] = 0x3f;
  }
  expect_error(serialize(bad), "nonzero key bias");

  bad = vars;
  for (Var& v : bad) {
    if (v.name == "decoder/activation") v.bytes[0] = 0;
  }
  expect_error(serialize(bad), "decoder/activation is 0, expected 3");

  bad = vars;
  for (Var& v : bad) {
    if (v.name == "encoder/num_heads") v.bytes = {3, 0};
  }
  expect_error(serialize(bad), "not a multiple of encoder/num_heads 3");

  bad = vars;
  bad.push_back(f32("encoder/layer_9999999/ffn/layer_norm/gamma", {kD}));
  expect_error(serialize(bad), "above the limit of 1024");

  expect_error(serialize(vars, {{"decoder/projection/weight", "decoder/nothing"}}),
               "alias 'decoder/projection/weight' names 'decoder/nothing'");
}

TEST_F(Ct2Hostile, Int8WeightsNeedAValidScale) {
  std::vector<Var> vars = tiny_whisper();
  for (Var& v : vars) {
    if (v.name == "encoder/conv2/weight") {
      v.dtype = 1;
      v.bytes.assign(kD * kD * 3, 5);
    }
  }
  expect_error(serialize(vars), "nor a quantized one with a 'encoder/conv2/weight_scale'");
  Var scale = f32("encoder/conv2/weight_scale", {kD});
  std::memset(scale.bytes.data(), 0, 4);
  vars.push_back(scale);
  expect_error(serialize(vars), "scale of row 0 is 0");
  vars.back() = f32("encoder/conv2/weight_scale", {kD + 1});
  expect_error(serialize(vars), "has a scale of shape [5], expected [4]");
  float s = 2.5f;
  vars.back() = f32("encoder/conv2/weight_scale", {kD});
  for (uint32_t i = 0; i < kD; ++i) std::memcpy(vars.back().bytes.data() + 4 * i, &s, 4);
  ASSERT_TRUE(import(serialize(vars)).ok());
  auto ckpt = io::Checkpoint::open((dir_ / "out").string());
  ASSERT_TRUE(ckpt.ok());
  EXPECT_EQ(ckpt->get("model.encoder.conv2.weight")->to_f32()[0], 2.0f);  // 5 / 2.5
}

TEST_F(Ct2Hostile, TokenizerMustNameWhispersTokens) {
  write("tokenizer.json", R"({"added_tokens": [{"id": 0, "content": "<|endoftext|>"}]})");
  expect_error(serialize(tiny_whisper()), "no added token <|startoftranscript|>");
  write("tokenizer.json", R"({"added_tokens": [{"id": 99, "content": "<|endoftext|>"}]})");
  expect_error(serialize(tiny_whisper()), "has id 99, outside the model's 12 embeddings");
  write("tokenizer.json", R"({"added_tokens": 3})");
  expect_error(serialize(tiny_whisper()), "no 'added_tokens' list");
  write("tokenizer.json", tiny_tokenizer());
  write("config.json", R"({"alignment_heads": [[1, 0]]})");
  expect_error(serialize(tiny_whisper()), "alignment head [1,0] is not [layer, head]");
  write("config.json", R"({"suppress_ids": [1, 12]})");
  expect_error(serialize(tiny_whisper()), "holds 12, not a token id below 12");
}

// A multilingual vocabulary (51865 entries or more, with language tokens) gets the language
// and task tables of openai/whisper-tiny's generation_config.json and no forced language.
TEST(Ct2WhisperConfig, MultilingualGenerationConfig) {
  importers::Ct2WhisperShape shape;
  shape.vocab = 51865;
  shape.decoder_layers = 4;
  shape.decoder_heads = 6;
  shape.target_positions = 448;
  const nlohmann::json tokenizer = nlohmann::json::parse(R"({"added_tokens": [
      {"id": 50257, "content": "<|endoftext|>", "special": true},
      {"id": 50258, "content": "<|startoftranscript|>", "special": true},
      {"id": 50259, "content": "<|en|>", "special": true},
      {"id": 50260, "content": "<|zh|>", "special": true},
      {"id": 50358, "content": "<|translate|>", "special": true},
      {"id": 50359, "content": "<|transcribe|>", "special": true},
      {"id": 50361, "content": "<|startofprev|>", "special": true},
      {"id": 50363, "content": "<|notimestamps|>", "special": true}]})");
  auto tokens = importers::whisper_tokens(tokenizer, {}, shape.vocab);
  ASSERT_TRUE(tokens.ok()) << tokens.status().to_string();
  auto gen = importers::whisper_generation_config(shape, *tokens, nlohmann::json());
  ASSERT_TRUE(gen.ok()) << gen.status().to_string();
  EXPECT_EQ((*gen)["is_multilingual"], true);
  EXPECT_EQ((*gen)["forced_decoder_ids"], nlohmann::json::parse("[[1, null], [2, 50359]]"));
  EXPECT_EQ((*gen)["lang_to_id"], nlohmann::json::parse(R"({"<|en|>": 50259, "<|zh|>": 50260})"));
  EXPECT_EQ((*gen)["task_to_id"],
            nlohmann::json::parse(R"({"transcribe": 50359, "translate": 50358})"));
  EXPECT_EQ((*gen)["bos_token_id"], 50257);
  EXPECT_EQ((*gen)["decoder_start_token_id"], 50258);
  EXPECT_EQ((*gen)["no_timestamps_token_id"], 50363);
  // CTranslate2's default: every head of the second half of the decoder layers.
  EXPECT_EQ((*gen)["alignment_heads"].size(), 12u);
  EXPECT_EQ((*gen)["alignment_heads"][0], nlohmann::json::parse("[2, 0]"));

  shape.vocab = 51864;  // tiny.en's size: the same tokens, English-only
  gen = importers::whisper_generation_config(shape, *tokens, nlohmann::json());
  ASSERT_TRUE(gen.ok());
  EXPECT_EQ((*gen)["is_multilingual"], false);
  EXPECT_FALSE(gen->contains("lang_to_id"));
  EXPECT_EQ((*gen)["bos_token_id"], 50258);
}

}  // namespace
}  // namespace qs
