// importers: llama2.c legacy `.bin` -> HF LlamaForCausalLM directory. The file layout is the one
// run.c's memory_map_weights walks: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
// vocab_size, seq_len), then f32 arrays, each stacked over layers where per-layer.
#include "importers/llama2c_import.h"

#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "core/json.h"
#include "core/mmap_file.h"
#include "core/tensor.h"
#include "io/checkpoint.h"
#include "io/generation_config.h"

namespace qs::importers {

using io::generation_config_to_json;
using io::GenerationConfig;
using io::write_checkpoint;
namespace {

namespace fs = std::filesystem;
constexpr int64_t kHeaderBytes = 7 * sizeof(int32_t);
// llama2.c hard-codes these in run.c (rmsnorm's 1e-5f, RoPE's 10000.0f) and in
// tokenizer.py (BOS 1, EOS 2); the .bin does not store them.
constexpr double kRmsNormEps = 1e-5;
constexpr double kRopeTheta = 10000.0;
constexpr int64_t kBosId = 1;
constexpr int64_t kEosId = 2;

std::string describe(const Llama2cConfig& c) {
  return "dim " + std::to_string(c.dim) + ", hidden_dim " + std::to_string(c.hidden_dim) +
         ", n_layers " + std::to_string(c.n_layers) + ", n_heads " + std::to_string(c.n_heads) +
         ", n_kv_heads " + std::to_string(c.n_kv_heads) + ", vocab_size " +
         std::to_string(c.shared_classifier ? c.vocab_size : -c.vocab_size) + ", seq_len " +
         std::to_string(c.seq_len);
}

// Number of f32 values after the header, in file order; see memory_map_weights in run.c.
unsigned __int128 expected_floats(const Llama2cConfig& c) {
  using u128 = unsigned __int128;
  const u128 dim = c.dim, hidden = c.hidden_dim, layers = c.n_layers, vocab = c.vocab_size;
  const u128 kv_dim = static_cast<u128>(c.kv_dim());
  u128 n = vocab * dim;                                                  // token_embedding_table
  n += layers * dim;                                                     // rms_att_weight
  n += layers * dim * dim * 2;                                           // wq, wo
  n += layers * dim * kv_dim * 2;                                        // wk, wv
  n += layers * dim;                                                     // rms_ffn_weight
  n += layers * dim * hidden * 3;                                        // w1, w2, w3
  n += dim;                                                              // rms_final_weight
  n += static_cast<u128>(c.seq_len) * static_cast<u128>(c.head_size());  // freq_cis real+imag
  if (!c.shared_classifier) n += vocab * dim;                            // wcls
  return n;
}

// Walks the f32 arrays of the file in order, handing out zero-copy views.
class WeightCursor {
 public:
  explicit WeightCursor(std::shared_ptr<MappedFile> file)
      : file_(std::move(file)),
        next_(reinterpret_cast<const float*>(file_->data() + kHeaderBytes)),
        owner_(file_, file_->data()) {}

  // The next `count` floats, for callers that slice them further.
  const float* take(int64_t count) {
    const float* p = next_;
    next_ += count;
    QS_CHECK(reinterpret_cast<const uint8_t*>(next_) <= file_->data() + file_->size());
    return p;
  }
  Tensor view(const float* p, std::vector<int64_t> shape) const {
    Tensor t;
    t.dtype = DType::kF32;
    t.shape = std::move(shape);
    t.data = p;
    t.owner = owner_;
    return t;
  }

 private:
  std::shared_ptr<MappedFile> file_;
  const float* next_;
  std::shared_ptr<const void> owner_;
};

Tensor permuted(const float* w, int64_t n_heads, int64_t head_size, int64_t cols) {
  std::vector<float> rows = permute_rows_to_rotate_half(w, n_heads, head_size, cols);
  return Tensor::from_f32(DType::kF32, {n_heads * head_size, cols}, rows);
}

}  // namespace

Result<Llama2cConfig> read_llama2c_config(const std::string& bin_path) {
  QS_ASSIGN_OR_RETURN(auto file, MappedFile::open(bin_path));
  if (file->size() < static_cast<size_t>(kHeaderBytes)) {
    return data_loss(bin_path + ": truncated llama2.c checkpoint (" + std::to_string(file->size()) +
                     " bytes, the header alone takes 28)");
  }
  int32_t h[7];
  std::memcpy(h, file->data(), sizeof(h));
  // Export versions >= 1 (llama2.c export.py version1/version2) start with the magic "ak42".
  if (static_cast<uint32_t>(h[0]) == 0x616b3432u) {
    return unimplemented(bin_path + ": llama2.c export version " + std::to_string(h[1]) +
                         " is not supported; only the legacy (version 0) format that run.c "
                         "reads is");
  }
  Llama2cConfig c;
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.shared_classifier = h[5] > 0;
  c.vocab_size = h[5] > 0 ? h[5] : -static_cast<int64_t>(h[5]);
  c.seq_len = h[6];
  const std::string where = bin_path + ": llama2.c header (" + describe(c) + ")";
  if (c.dim <= 0 || c.hidden_dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 ||
      c.vocab_size <= 0 || c.seq_len <= 0) {
    return data_loss(where + ": every field must be positive (vocab_size may be negative)");
  }
  if (c.dim % c.n_heads != 0 || c.head_size() % 2 != 0) {
    return data_loss(where + ": dim must split into n_heads heads of even size");
  }
  if (c.n_kv_heads > c.n_heads || c.n_heads % c.n_kv_heads != 0) {
    return data_loss(where + ": n_heads must be a multiple of n_kv_heads");
  }
  const unsigned __int128 expected = kHeaderBytes + expected_floats(c) * 4;
  if (expected != file->size()) {
    const std::string expected_str =
        expected > UINT64_MAX ? "more than 2^64" : std::to_string(static_cast<uint64_t>(expected));
    return data_loss(where + " implies " + expected_str + " bytes, but the file has " +
                     std::to_string(file->size()));
  }
  return c;
}

std::vector<float> permute_rows_to_rotate_half(const float* w, int64_t n_heads, int64_t head_size,
                                               int64_t cols) {
  QS_CHECK(head_size % 2 == 0);
  const int64_t half = head_size / 2;
  std::vector<float> out(static_cast<size_t>(n_heads * head_size * cols));
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t p = 0; p < 2; ++p) {
        const float* src = w + (h * head_size + 2 * i + p) * cols;
        float* dst = out.data() + (h * head_size + p * half + i) * cols;
        std::memcpy(dst, src, static_cast<size_t>(cols) * sizeof(float));
      }
    }
  }
  return out;
}

nlohmann::json llama2c_hf_config(const Llama2cConfig& c) {
  return {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", c.dim},
      {"intermediate_size", c.hidden_dim},
      {"num_hidden_layers", c.n_layers},
      {"num_attention_heads", c.n_heads},
      {"num_key_value_heads", c.n_kv_heads},
      {"head_dim", c.head_size()},
      {"vocab_size", c.vocab_size},
      {"max_position_embeddings", c.seq_len},
      {"rms_norm_eps", kRmsNormEps},
      {"rope_theta", kRopeTheta},
      {"tie_word_embeddings", c.shared_classifier},
      {"torch_dtype", "float32"},
      {"bos_token_id", kBosId},
      {"eos_token_id", kEosId},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"mlp_bias", false},
  };
}

Status import_llama2c_weights(const std::string& bin_path, const std::string& out_dir) {
  QS_ASSIGN_OR_RETURN(Llama2cConfig c, read_llama2c_config(bin_path));
  QS_ASSIGN_OR_RETURN(auto file, MappedFile::open(bin_path));
  // The size may have changed between the two opens; the cursor relies on it.
  if (static_cast<unsigned __int128>(file->size()) != kHeaderBytes + expected_floats(c) * 4) {
    return data_loss(bin_path + ": file changed while importing");
  }

  const int64_t dim = c.dim, hidden = c.hidden_dim, layers = c.n_layers, vocab = c.vocab_size;
  const int64_t hs = c.head_size(), kv_dim = c.kv_dim(), q_dim = c.n_heads * hs;
  WeightCursor cur(file);
  const float* embed = cur.take(vocab * dim);         // [vocab, dim]
  const float* rms_att = cur.take(layers * dim);      // [layers, dim]
  const float* wq = cur.take(layers * q_dim * dim);   // [layers, q_dim, dim]
  const float* wk = cur.take(layers * kv_dim * dim);  // [layers, kv_dim, dim]
  const float* wv = cur.take(layers * kv_dim * dim);  // [layers, kv_dim, dim]
  const float* wo = cur.take(layers * dim * q_dim);   // [layers, dim, q_dim]
  const float* rms_ffn = cur.take(layers * dim);      // [layers, dim]
  const float* w1 = cur.take(layers * hidden * dim);  // [layers, hidden, dim]
  const float* w2 = cur.take(layers * dim * hidden);  // [layers, dim, hidden]
  const float* w3 = cur.take(layers * hidden * dim);  // [layers, hidden, dim]
  const float* rms_final = cur.take(dim);             // [dim]
  cur.take(c.seq_len * hs);  // freq_cis real and imag [seq_len, hs/2] each: HF recomputes RoPE
  const float* wcls = c.shared_classifier ? nullptr : cur.take(vocab * dim);  // [vocab, dim]

  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.emplace_back("model.embed_tokens.weight", cur.view(embed, {vocab, dim}));
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    tensors.emplace_back(p + "input_layernorm.weight", cur.view(rms_att + l * dim, {dim}));
    tensors.emplace_back(p + "self_attn.q_proj.weight",
                         permuted(wq + l * q_dim * dim, c.n_heads, hs, dim));
    tensors.emplace_back(p + "self_attn.k_proj.weight",
                         permuted(wk + l * kv_dim * dim, c.n_kv_heads, hs, dim));
    tensors.emplace_back(p + "self_attn.v_proj.weight",
                         cur.view(wv + l * kv_dim * dim, {kv_dim, dim}));
    tensors.emplace_back(p + "self_attn.o_proj.weight",
                         cur.view(wo + l * dim * q_dim, {dim, q_dim}));
    tensors.emplace_back(p + "post_attention_layernorm.weight", cur.view(rms_ffn + l * dim, {dim}));
    tensors.emplace_back(p + "mlp.gate_proj.weight",
                         cur.view(w1 + l * hidden * dim, {hidden, dim}));
    tensors.emplace_back(p + "mlp.up_proj.weight", cur.view(w3 + l * hidden * dim, {hidden, dim}));
    tensors.emplace_back(p + "mlp.down_proj.weight",
                         cur.view(w2 + l * dim * hidden, {dim, hidden}));
  }
  tensors.emplace_back("model.norm.weight", cur.view(rms_final, {dim}));
  if (wcls != nullptr) tensors.emplace_back("lm_head.weight", cur.view(wcls, {vocab, dim}));

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return io_error("cannot create " + out_dir + ": " + ec.message());
  QS_RETURN_IF_ERROR(
      write_json((fs::path(out_dir) / "config.json").string(), llama2c_hf_config(c)));
  GenerationConfig gen;
  gen.bos_token_id = kBosId;
  gen.eos_token_ids = {kEosId};
  QS_RETURN_IF_ERROR(write_json((fs::path(out_dir) / "generation_config.json").string(),
                                generation_config_to_json(gen)));
  // write_checkpoint removes checkpoint files an earlier import may have left in out_dir.
  return write_checkpoint(out_dir, tensors);
}

}  // namespace qs::importers
