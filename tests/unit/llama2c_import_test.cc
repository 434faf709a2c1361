// Unit tests for the llama2.c importer. On the real stories260K.bin: every imported tensor is
// bit-equal to the .bin's array once the q/k row permutation is undone (the inverse is spelled
// out here from HF's `permute`, independently of the importer), and attention scores computed
// llama2.c-style (interleaved RoPE on the original weights) equal HF-style scores (rotate-half
// on the imported weights). On synthetic files: the unshared classifier and header/size errors.
#include "importers/llama2c_import.h"
#include "core/json.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include "../common/shared_data.h"
#include "core/mmap_file.h"
#include "io/checkpoint.h"
#include "io/generation_config.h"

namespace qs::io {

using importers::import_llama2c_weights;
using importers::read_llama2c_config;
namespace {

namespace fs = std::filesystem;

const std::string kStoriesBin = ::qs::testing::shared_data_dir() + "/models/stories260K.bin";

class Llama2cImport : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "qs_l2c_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }
  std::string dir_;
};

// The .bin as the test reads it: header ints and the f32 arrays, without the importer's help.
struct Bin {
  int32_t header[7];
  std::vector<float> floats;
};

Bin read_bin(const std::string& p) {
  Bin b;
  auto bytes = read_file(p);
  EXPECT_TRUE(bytes.ok());
  std::memcpy(b.header, bytes->data(), 28);
  b.floats.resize((bytes->size() - 28) / 4);
  std::memcpy(b.floats.data(), bytes->data() + 28, b.floats.size() * 4);
  return b;
}

// Compares `t` (an imported tensor) with `n` floats of the .bin starting at `src`; for q/k
// rows are mapped back through the inverse of HF's permute: imported row h*hs + p*hs/2 + i
// holds original row h*hs + 2i + p.
void expect_bit_equal(const Tensor& t, const float* src, int64_t rows, int64_t cols,
                      int64_t head_size, const std::string& name) {
  ASSERT_EQ(t.dtype, DType::kF32) << name;
  ASSERT_EQ(t.numel(), rows * cols) << name;
  const float* got = t.ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    int64_t orig = r;
    if (head_size > 0) {
      const int64_t h = r / head_size, within = r % head_size, half = head_size / 2;
      const int64_t p = within / half, i = within % half;
      orig = h * head_size + 2 * i + p;
    }
    ASSERT_EQ(std::memcmp(got + r * cols, src + orig * cols, cols * sizeof(float)), 0)
        << name << " row " << r;
  }
}

TEST_F(Llama2cImport, Stories260KIsBitEqualAfterUndoingThePermutation) {
  QS_SKIP_WITHOUT_SHARED_DATA("models/stories260K.bin");
  ASSERT_TRUE(import_llama2c_weights(kStoriesBin, dir_).ok());
  const Bin bin = read_bin(kStoriesBin);
  const int64_t dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512;
  const int64_t hs = dim / heads, kv_dim = kv_heads * hs;
  ASSERT_EQ(std::vector<int32_t>(bin.header, bin.header + 7),
            (std::vector<int32_t>{64, 172, 5, 8, 4, 512, 512}));

  auto ckpt = Checkpoint::open(dir_);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->names().size(), static_cast<size_t>(1 + layers * 9 + 1));
  EXPECT_FALSE(ckpt->has("lm_head.weight"));  // shared classifier -> tied embeddings
  EXPECT_EQ(ckpt->metadata().at("format"), "pt");

  const float* f = bin.floats.data();
  auto get = [&](const std::string& name, std::vector<int64_t> shape) {
    auto t = ckpt->get(name, shape);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    return t.ok() ? *t : Tensor();
  };
  expect_bit_equal(get("model.embed_tokens.weight", {vocab, dim}), f, vocab, dim, 0, "embed");
  f += vocab * dim;
  const float* rms_att = f;
  const float* wq = rms_att + layers * dim;
  const float* wk = wq + layers * dim * dim;
  const float* wv = wk + layers * kv_dim * dim;
  const float* wo = wv + layers * kv_dim * dim;
  const float* rms_ffn = wo + layers * dim * dim;
  const float* w1 = rms_ffn + layers * dim;
  const float* w2 = w1 + layers * hidden * dim;
  const float* w3 = w2 + layers * dim * hidden;
  const float* rms_final = w3 + layers * hidden * dim;
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    expect_bit_equal(get(p + "input_layernorm.weight", {dim}), rms_att + l * dim, 1, dim, 0, p);
    expect_bit_equal(get(p + "self_attn.q_proj.weight", {dim, dim}), wq + l * dim * dim, dim, dim,
                     hs, p + "q");
    expect_bit_equal(get(p + "self_attn.k_proj.weight", {kv_dim, dim}), wk + l * kv_dim * dim,
                     kv_dim, dim, hs, p + "k");
    expect_bit_equal(get(p + "self_attn.v_proj.weight", {kv_dim, dim}), wv + l * kv_dim * dim,
                     kv_dim, dim, 0, p + "v");
    expect_bit_equal(get(p + "self_attn.o_proj.weight", {dim, dim}), wo + l * dim * dim, dim, dim,
                     0, p + "o");
    expect_bit_equal(get(p + "post_attention_layernorm.weight", {dim}), rms_ffn + l * dim, 1, dim,
                     0, p);
    expect_bit_equal(get(p + "mlp.gate_proj.weight", {hidden, dim}), w1 + l * hidden * dim, hidden,
                     dim, 0, p + "w1");
    expect_bit_equal(get(p + "mlp.down_proj.weight", {dim, hidden}), w2 + l * dim * hidden, dim,
                     hidden, 0, p + "w2");
    expect_bit_equal(get(p + "mlp.up_proj.weight", {hidden, dim}), w3 + l * hidden * dim, hidden,
                     dim, 0, p + "w3");
  }
  expect_bit_equal(get("model.norm.weight", {dim}), rms_final, 1, dim, 0, "norm");

  auto config = read_json(path("config.json"));
  ASSERT_TRUE(config.ok());
  EXPECT_EQ((*config)["architectures"], nlohmann::json::array({"LlamaForCausalLM"}));
  EXPECT_EQ((*config)["hidden_size"], 64);
  EXPECT_EQ((*config)["intermediate_size"], 172);
  EXPECT_EQ((*config)["num_hidden_layers"], 5);
  EXPECT_EQ((*config)["num_attention_heads"], 8);
  EXPECT_EQ((*config)["num_key_value_heads"], 4);
  EXPECT_EQ((*config)["vocab_size"], 512);
  EXPECT_EQ((*config)["max_position_embeddings"], 512);
  EXPECT_EQ((*config)["tie_word_embeddings"], true);
  EXPECT_EQ((*config)["rms_norm_eps"], 1e-5);
  EXPECT_EQ((*config)["rope_theta"], 10000.0);
  EXPECT_EQ((*config)["hidden_act"], "silu");
  EXPECT_EQ((*config)["torch_dtype"], "float32");
  auto gen = read_generation_config(dir_);
  ASSERT_TRUE(gen.ok());
  EXPECT_EQ(gen->bos_token_id, 1);
  EXPECT_EQ(gen->eos_token_ids, (std::vector<int64_t>{2}));
}

// models/stories260K is committed; it must be exactly what the importer makes today.
TEST_F(Llama2cImport, ShippedModelEqualsFreshImport) {
  QS_SKIP_WITHOUT_SHARED_DATA("models/stories260K.bin");
  ASSERT_TRUE(import_llama2c_weights(kStoriesBin, dir_).ok());
  const fs::path shipped = fs::path(QS_SOURCE_DIR) / "models" / "stories260K";
  for (const char* name : {"config.json", "generation_config.json", "model.safetensors"}) {
    auto fresh = read_file(path(name));
    auto committed = read_file((shipped / name).string());
    ASSERT_TRUE(fresh.ok() && committed.ok()) << name;
    EXPECT_TRUE(*fresh == *committed)
        << name << " differs: regenerate with the command in " << (shipped / "README.md").string();
  }
}

// The built binary: `quantserve import llama2c` writes weights and tokenizer files; usage
// errors exit 2, conversion errors exit 1, neither writes a checkpoint.
TEST_F(Llama2cImport, ImportCommand) {
  QS_SKIP_WITHOUT_SHARED_DATA("models/stories260K.bin");
  auto run = [](const std::string& args) {
    const std::string cmd = std::string(QS_BINARY) + " import " + args + " >/dev/null 2>&1";
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  const std::string data = ::qs::testing::shared_data_dir() + "/models/";
  const std::string out = path("cli");
  ASSERT_EQ(run("llama2c --checkpoint " + kStoriesBin + " --tokenizer " + data +
                "tok512.bin --out " + out),
            0);
  for (const char* name : {"config.json", "generation_config.json", "model.safetensors",
                           "tokenizer.model", "tokenizer_config.json"}) {
    EXPECT_TRUE(fs::exists(fs::path(out) / name)) << name;
  }
  auto ckpt = Checkpoint::open(out);
  ASSERT_TRUE(ckpt.ok());
  EXPECT_EQ(ckpt->names().size(), 47u);

  EXPECT_EQ(run("llama2c --out " + path("x")), 2);                                // no --checkpoint
  EXPECT_EQ(run("gguf --checkpoint " + kStoriesBin + " --out " + path("x")), 2);  // format
  EXPECT_EQ(run("llama2c --checkpoint " + kStoriesBin + " --out " + path("x") + " --bogus"), 2);
  EXPECT_EQ(run("llama2c --checkpoint " + data + "tok512.bin --out " + path("x")), 1);
  EXPECT_FALSE(fs::exists(path("x")));
}

// y = W x for W [rows, cols].
std::vector<float> matvec(const float* w, const std::vector<float>& x, int64_t rows) {
  const int64_t cols = static_cast<int64_t>(x.size());
  std::vector<float> y(rows, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0;
    for (int64_t c = 0; c < cols; ++c) acc += double(w[r * cols + c]) * x[c];
    y[r] = static_cast<float>(acc);
  }
  return y;
}

// run.c's RoPE: rotate pairs (2i, 2i+1) of each head by pos / 10000^(2i/hs).
void rope_interleaved(std::vector<float>* v, int64_t hs, int pos) {
  for (size_t i = 0; i < v->size(); i += 2) {
    const double freq = 1.0 / std::pow(10000.0, double(i % hs) / double(hs));
    const double c = std::cos(pos * freq), s = std::sin(pos * freq);
    const double a = (*v)[i], b = (*v)[i + 1];
    (*v)[i] = static_cast<float>(a * c - b * s);
    (*v)[i + 1] = static_cast<float>(a * s + b * c);
  }
}

// transformers' apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, per head.
void rope_rotate_half(std::vector<float>* v, int64_t hs, int pos) {
  const int64_t half = hs / 2;
  for (size_t h = 0; h < v->size(); h += hs) {
    for (int64_t j = 0; j < half; ++j) {
      const double freq = 1.0 / std::pow(10000.0, double(2 * j) / double(hs));
      const double c = std::cos(pos * freq), s = std::sin(pos * freq);
      const double a = (*v)[h + j], b = (*v)[h + j + half];
      (*v)[h + j] = static_cast<float>(a * c - b * s);
      (*v)[h + j + half] = static_cast<float>(b * c + a * s);
    }
  }
}

TEST_F(Llama2cImport, AttentionScoresMatchAcrossRopeConventions) {
  QS_SKIP_WITHOUT_SHARED_DATA("models/stories260K.bin");
  ASSERT_TRUE(import_llama2c_weights(kStoriesBin, dir_).ok());
  const Bin bin = read_bin(kStoriesBin);
  const int64_t dim = 64, layers = 5, heads = 8, kv_heads = 4, vocab = 512, hs = 8;
  const int64_t kv_dim = kv_heads * hs;
  const float* wq0 = bin.floats.data() + vocab * dim + layers * dim;  // layer 0
  const float* wk0 = wq0 + layers * dim * dim;
  auto ckpt = Checkpoint::open(dir_);
  ASSERT_TRUE(ckpt.ok());
  auto q_proj = ckpt->get("model.layers.0.self_attn.q_proj.weight");
  auto k_proj = ckpt->get("model.layers.0.self_attn.k_proj.weight");
  ASSERT_TRUE(q_proj.ok() && k_proj.ok());

  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> xq(dim), xk(dim);
  for (auto& v : xq) v = normal(rng);
  for (auto& v : xk) v = normal(rng);
  const int q_pos = 37, k_pos = 11;

  auto q_c = matvec(wq0, xq, dim), k_c = matvec(wk0, xk, kv_dim);
  rope_interleaved(&q_c, hs, q_pos);
  rope_interleaved(&k_c, hs, k_pos);
  auto q_hf = matvec(q_proj->ptr<float>(), xq, dim),
       k_hf = matvec(k_proj->ptr<float>(), xk, kv_dim);
  rope_rotate_half(&q_hf, hs, q_pos);
  rope_rotate_half(&k_hf, hs, k_pos);

  double max_score = 0;
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t kvh = h / (heads / kv_heads);  // grouped-query attention
    double score_c = 0, score_hf = 0;
    for (int64_t d = 0; d < hs; ++d) {
      score_c += double(q_c[h * hs + d]) * k_c[kvh * hs + d];
      score_hf += double(q_hf[h * hs + d]) * k_hf[kvh * hs + d];
    }
    EXPECT_NEAR(score_hf, score_c, 1e-4 * (1 + std::fabs(score_c))) << "head " << h;
    max_score = std::max(max_score, std::fabs(score_c));
  }
  EXPECT_GT(max_score, 1e-2);  // the scores are not trivially zero
}

// Writes a llama2.c .bin with the given header; weights are 0.5 * index so every array is
// distinguishable. `extra_floats` pads (or, negative, truncates) the file.
std::string write_bin(const std::string& p, std::vector<int32_t> header, int64_t n_floats,
                      int64_t extra_floats = 0) {
  std::string bytes(28, '\0');
  std::memcpy(bytes.data(), header.data(), 28);
  std::vector<float> w(static_cast<size_t>(n_floats + extra_floats));
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f * static_cast<float>(i);
  bytes.append(reinterpret_cast<const char*>(w.data()), w.size() * 4);
  EXPECT_TRUE(write_file(p, bytes).ok());
  return p;
}

// Float count of a tiny model: dim 8, hidden 12, 2 layers, 2 heads, 1 kv head, vocab 10,
// seq_len 4, unshared classifier.
constexpr int64_t kTinyFloats =
    10 * 8 + 2 * 8 + 2 * 64 * 2 + 2 * 8 * 4 * 2 + 2 * 8 + 2 * 8 * 12 * 3 + 8 + 4 * 4 + 10 * 8;

TEST_F(Llama2cImport, UnsharedClassifier) {
  const std::string bin = write_bin(path("tiny.bin"), {8, 12, 2, 2, 1, -10, 4}, kTinyFloats);
  auto cfg = read_llama2c_config(bin);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_FALSE(cfg->shared_classifier);
  EXPECT_EQ(cfg->vocab_size, 10);
  EXPECT_EQ(cfg->kv_dim(), 4);
  const std::string out = path("out");
  ASSERT_TRUE(import_llama2c_weights(bin, out).ok());
  auto ckpt = Checkpoint::open(out);
  ASSERT_TRUE(ckpt.ok());
  auto lm_head = ckpt->get("lm_head.weight", {10, 8});
  ASSERT_TRUE(lm_head.ok()) << lm_head.status().to_string();
  // wcls is the last array of the file.
  EXPECT_EQ(lm_head->ptr<float>()[0], 0.5f * (kTinyFloats - 80));
  EXPECT_EQ(lm_head->ptr<float>()[79], 0.5f * (kTinyFloats - 1));
  // k_proj of layer 1 (one kv head of size 4): rows 0,2,1,3 of the original.
  auto k1 = ckpt->get("model.layers.1.self_attn.k_proj.weight", {4, 8});
  ASSERT_TRUE(k1.ok());
  const int64_t wk1_start = 80 + 16 + 2 * 64 + 32;  // embed, rms_att, wq, layer-0 wk
  const int64_t expected_rows[4] = {0, 2, 1, 3};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(k1->ptr<float>()[r * 8], 0.5f * (wk1_start + expected_rows[r] * 8)) << r;
  }
  auto config = read_json((fs::path(out) / "config.json").string());
  ASSERT_TRUE(config.ok());
  EXPECT_EQ((*config)["tie_word_embeddings"], false);
  EXPECT_EQ((*config)["vocab_size"], 10);
}

TEST_F(Llama2cImport, SizeMismatchIsAnError) {
  const int64_t expected_bytes = 28 + 4 * kTinyFloats;
  for (int64_t extra : {-1, 1}) {
    const std::string bin =
        write_bin(path("bad.bin"), {8, 12, 2, 2, 1, -10, 4}, kTinyFloats, extra);
    auto cfg = read_llama2c_config(bin);
    ASSERT_FALSE(cfg.ok());
    EXPECT_EQ(cfg.status().code(), StatusCode::kDataLoss);
    EXPECT_EQ(cfg.status().message(),
              bin +
                  ": llama2.c header (dim 8, hidden_dim 12, n_layers 2, n_heads 2, n_kv_heads 1, "
                  "vocab_size -10, seq_len 4) implies " +
                  std::to_string(expected_bytes) + " bytes, but the file has " +
                  std::to_string(expected_bytes + 4 * extra));
    EXPECT_FALSE(import_llama2c_weights(bin, path("never")).ok());
    EXPECT_FALSE(fs::exists(path("never")));
  }
  // The shared-classifier reading of the same file is 80 floats short.
  const std::string shared = write_bin(path("s.bin"), {8, 12, 2, 2, 1, 10, 4}, kTinyFloats);
  EXPECT_FALSE(read_llama2c_config(shared).ok());
  // A header that claims an absurd model must not overflow.
  const std::string huge =
      write_bin(path("h.bin"), {1 << 30, 1 << 30, 1 << 30, 2, 2, 1 << 30, 1 << 30}, 4);
  auto r = read_llama2c_config(huge);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("implies"), std::string::npos) << r.status().message();
}

TEST_F(Llama2cImport, BadHeaders) {
  struct Case {
    std::vector<int32_t> header;
    const char* expect;
  };
  const Case cases[] = {
      {{0, 12, 2, 2, 1, 10, 4}, "every field must be positive"},
      {{8, 12, 2, 3, 1, 10, 4}, "dim must split into n_heads heads of even size"},
      {{6, 12, 2, 2, 1, 10, 4}, "dim must split into n_heads heads of even size"},
      {{8, 12, 2, 2, 3, 10, 4}, "n_heads must be a multiple of n_kv_heads"},
  };
  for (const auto& c : cases) {
    auto r = read_llama2c_config(write_bin(path("h.bin"), c.header, 16));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
  ASSERT_TRUE(write_file(path("short.bin"), std::string(20, '\1')).ok());
  auto r = read_llama2c_config(path("short.bin"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("truncated llama2.c checkpoint (20 bytes"),
            std::string::npos);
  // Newer export versions start with the magic "ak42" and a version number.
  r = read_llama2c_config(write_bin(path("v1.bin"), {0x616b3432, 1, 0, 0, 0, 0, 0}, 16));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("export version 1 is not supported"), std::string::npos);
  r = read_llama2c_config(path("missing.bin"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIo);
}

}  // namespace
}  // namespace qs::io
