// diffusion: pipeline memory sizing (see pipeline_memory.h).
#include "diffusion/pipeline_memory.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "core/units_text.h"
#include "diffusion/autoencoder_kl_wan.h"
#include "diffusion/component_specs.h"
#include "diffusion/flux_transformer.h"
#include "diffusion/pipeline_registry.h"
#include "diffusion/wan_pipeline.h"
#include "diffusion/wan_text.h"
#include "diffusion/wan_transformer.h"
#include "io/checkpoint.h"
#include "models/component.h"
#include "ops/quant_matrix.h"

namespace qs::diffusion {

namespace {
// A namespace of its own: the room compiles in unity batches, whose files share the anonymous
// namespace (wan_pipeline.cc has its own kWanMaxSide).
namespace pipeline_mem {

namespace fs = std::filesystem;

// WanPipeline's request limits (wan_pipeline.cc): a size past them is refused there too.
constexpr int64_t kWanMaxSide = 4096;
constexpr int64_t kWanMaxFrames = 1024;

bool has_weights(const std::string& dir) {
  const std::string base = io::Checkpoint::base_name(dir);
  return fs::exists(fs::path(dir) / (base + ".safetensors")) ||
         fs::exists(fs::path(dir) / (base + ".safetensors.index.json"));
}

// The weight files' headers when they are there, else null.
Result<std::shared_ptr<io::Checkpoint>> open_headers(const std::string& dir) {
  if (!has_weights(dir)) return std::shared_ptr<io::Checkpoint>();
  QS_ASSIGN_OR_RETURN(io::Checkpoint opened,
                      io::Checkpoint::open(dir, io::Checkpoint::base_name(dir)));
  return std::make_shared<io::Checkpoint>(std::move(opened));
}

// How load holds a tensor.
enum class Held {
  kLinear,  // a matmul weight: repacked when the quantization_config quantizes it, else a view
  kView,    // a view of the file, never quantized (Wan's patch embedding, T5's embedding table)
  kF32,     // widened to f32: biases, norms, modulation tables, convolution kernels
};

struct SizedTensor {
  std::string name;
  std::vector<int64_t> shape;
  Held held = Held::kF32;
};

// A component from its tensor list: a view takes the dtype of the weight files when they are
// there, 2 bytes a value otherwise.
ComponentMemory size_tensors(const std::string& name, const models::Component& c,
                             const io::Checkpoint* ckpt, const std::vector<SizedTensor>& tensors) {
  const io::QuantConfig& quant = c.quantization();
  ComponentMemory m;
  m.name = name;
  m.source = ckpt ? "config.json + weight headers" : "config.json";
  for (const SizedTensor& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    m.params += numel;
    m.as_bf16 += static_cast<size_t>(numel) * 2;
    if (t.held == Held::kF32) {
      m.resident += static_cast<size_t>(numel) * 4;
      continue;
    }
    if (t.held == Held::kLinear) {
      ++m.linears;
      const std::string module = t.name.substr(0, t.name.size() - std::string(".weight").size());
      const formats::QuantScheme scheme = quant.scheme_for(module);
      if (scheme.quantized()) {
        ++m.quantized_linears;
        m.resident += ops::QuantMatrix::resident_bytes_for(scheme, t.shape[0], t.shape[1]);
        continue;
      }
    }
    if (ckpt && ckpt->has(t.name)) {
      m.resident += ckpt->get(t.name).value().nbytes();
    } else {
      m.resident += static_cast<size_t>(numel) * 2;
    }
  }
  return m;
}

// The weights column of a component load does not quantize: the stored dtype, "16-bit" when
// only the config is there.
std::string stored_dtype(const io::Checkpoint* ckpt, const std::vector<SizedTensor>& tensors) {
  if (!ckpt) return "16-bit";
  std::string seen;
  for (const SizedTensor& t : tensors) {
    if (!ckpt->has(t.name)) continue;
    const std::string d = dtype_name(ckpt->get(t.name).value().dtype);
    if (!seen.empty() && d != seen) return "mixed dtypes";
    seen = d;
  }
  return seen.empty() ? "16-bit" : seen;
}

// The transformer from its config: linears as stored (or as quantized by its config), biases
// and norm weights widened to f32 as load does. Dense weights take the dtype of the weight
// files when they are there, bf16 otherwise.
Result<ComponentMemory> transformer_memory(const std::string& dir, FluxConfig* config) {
  QS_ASSIGN_OR_RETURN(models::Component c, models::Component::open_config(dir));
  QS_ASSIGN_OR_RETURN(*config, read_flux_config(c));
  QS_ASSIGN_OR_RETURN(std::shared_ptr<io::Checkpoint> ckpt, open_headers(dir));
  std::vector<SizedTensor> tensors;
  for (const FluxTensorSpec& t : flux_tensor_specs(*config)) {
    tensors.push_back({t.name, t.shape, t.shape.size() == 2 ? Held::kLinear : Held::kF32});
  }
  ComponentMemory m = size_tensors("transformer", c, ckpt.get(), tensors);
  m.scheme = c.quantization().quantized() ? c.quantization().summary() : "16-bit";
  return m;
}

// Another component from its weight files: matmul weights stay views of the file; the
// embedding tables, convolution kernels, norms and biases are widened to f32 at load.
Result<ComponentMemory> stored_memory(const std::string& name, const std::string& dir) {
  ComponentMemory m;
  m.name = name;
  if (!has_weights(dir)) {
    m.source = "absent";
    return m;
  }
  QS_ASSIGN_OR_RETURN(io::Checkpoint ckpt,
                      io::Checkpoint::open(dir, io::Checkpoint::base_name(dir)));
  m.source = "weight headers";
  DType first = DType::kF32;
  bool mixed = false, seen = false;
  for (const std::string& n : ckpt.names()) {
    const Tensor t = ckpt.get(n).value();
    m.params += t.numel();
    m.as_bf16 += static_cast<size_t>(t.numel()) * 2;
    const bool view = t.shape.size() == 2 && n.find("embed") == std::string::npos &&
                      n.find("relative_attention_bias") == std::string::npos &&
                      n.find("shared") == std::string::npos;
    if (view) ++m.linears;
    m.resident += view ? t.nbytes() : static_cast<size_t>(t.numel()) * 4;
    if (seen && t.dtype != first) mixed = true;
    if (!seen) first = t.dtype, seen = true;
  }
  m.scheme = mixed ? "mixed dtypes" : dtype_name(first);
  return m;
}

Result<PipelineMemory> flux_memory(const std::string& dir, bool pipeline, int64_t width,
                                   int64_t height, int64_t max_sequence_length, int threads) {
  if (width <= 0 || height <= 0 || width % 16 != 0 || height % 16 != 0) {
    return invalid_argument("--width and --height must be positive multiples of 16");
  }
  if (max_sequence_length <= 0) return invalid_argument("--max-sequence-length must be positive");
  PipelineMemory pm;
  pm.family = family_for_class("FluxPipeline");
  pm.width = width;
  pm.height = height;
  pm.n_img = (width / 16) * (height / 16);
  pm.n_txt = max_sequence_length;
  const std::string tdir = pipeline ? (fs::path(dir) / "transformer").string() : dir;
  FluxConfig config;
  QS_ASSIGN_OR_RETURN(ComponentMemory t, transformer_memory(tdir, &config));
  pm.components.push_back(t);
  if (pipeline) {
    for (const char* name : {"text_encoder", "text_encoder_2", "vae"}) {
      const fs::path sub = fs::path(dir) / name;
      if (!fs::is_directory(sub)) continue;
      QS_ASSIGN_OR_RETURN(ComponentMemory c, stored_memory(name, sub.string()));
      pm.components.push_back(c);
    }
  }
  pm.activations_batch1 = flux_activation_bytes(config, 1, pm.n_img, pm.n_txt, threads);
  pm.activations_batch2 = flux_activation_bytes(config, 2, pm.n_img, pm.n_txt, threads);
  return pm;
}

// Wan: every component from its config (the UMT5 encoder, the expert(s), the VAE), the weight
// headers giving stored dtypes where the files are there.
Result<PipelineMemory> wan_memory(const PipelineIndex& index, int64_t width, int64_t height,
                                  int64_t frames, int64_t max_sequence_length, int threads) {
  PipelineMemory pm;
  pm.family = index.family;
  pm.class_name = index.class_name;
  pm.width = width, pm.height = height, pm.frames = frames, pm.n_txt = max_sequence_length;

  QS_ASSIGN_OR_RETURN(const std::string text_dir, index.component_dir("text_encoder"));
  QS_ASSIGN_OR_RETURN(models::Component text, models::Component::open_config(text_dir));
  QS_ASSIGN_OR_RETURN(const T5Config t5, read_t5_config(text));
  QS_ASSIGN_OR_RETURN(std::shared_ptr<io::Checkpoint> text_ckpt, open_headers(text_dir));
  std::vector<SizedTensor> tensors;
  for (const models::TensorSpec& t : t5_encoder_tensor_specs(t5)) {
    const Held held = t.linear                    ? Held::kLinear
                      : t.name == "shared.weight" ? Held::kView
                                                  : Held::kF32;
    tensors.push_back({t.name, t.shape, held});
  }
  pm.components.push_back(size_tensors("text_encoder", text, text_ckpt.get(), tensors));
  pm.components.back().scheme = stored_dtype(text_ckpt.get(), tensors);

  std::vector<WanTransformerConfig> experts;
  for (const std::string& name : index.transformers()) {
    QS_ASSIGN_OR_RETURN(const std::string dir, index.component_dir(name));
    QS_ASSIGN_OR_RETURN(models::Component c, models::Component::open_config(dir));
    QS_ASSIGN_OR_RETURN(WanTransformerConfig config, read_wan_transformer_config(c));
    QS_ASSIGN_OR_RETURN(std::shared_ptr<io::Checkpoint> ckpt, open_headers(dir));
    tensors.clear();
    for (const models::TensorSpec& t : wan_transformer_tensor_specs(config)) {
      // The patch embedding runs as a linear over flattened patches, a view of the 5-D kernel.
      const Held held = t.linear                             ? Held::kLinear
                        : t.name == "patch_embedding.weight" ? Held::kView
                                                             : Held::kF32;
      tensors.push_back({t.name, t.shape, held});
    }
    pm.components.push_back(size_tensors(name, c, ckpt.get(), tensors));
    pm.components.back().scheme = c.quantization().quantized() ? c.quantization().summary()
                                                               : stored_dtype(ckpt.get(), tensors);
    experts.push_back(config);
  }
  if (experts.empty()) {
    return invalid_argument(index.dir + "/model_index.json: the pipeline has no transformer");
  }

  QS_ASSIGN_OR_RETURN(const std::string vae_dir, index.component_dir("vae"));
  QS_ASSIGN_OR_RETURN(models::Component vae_c, models::Component::open_config(vae_dir));
  QS_ASSIGN_OR_RETURN(const WanVaeConfig vae, read_wan_vae_config(vae_c));
  QS_ASSIGN_OR_RETURN(std::shared_ptr<io::Checkpoint> vae_ckpt, open_headers(vae_dir));
  // AutoencoderKLWan::load reads the encoder when the checkpoint has one; diffusers saves it.
  const bool encoder = !vae_ckpt || vae_ckpt->has("encoder.conv_in.weight");
  tensors.clear();
  for (const models::TensorSpec& t : wan_vae_tensor_specs(vae, encoder)) {
    tensors.push_back({t.name, t.shape, Held::kF32});
  }
  pm.components.push_back(size_tensors("vae", vae_c, vae_ckpt.get(), tensors));
  pm.components.back().scheme = stored_dtype(vae_ckpt.get(), tensors);

  // The request checks WanPipeline::validate makes on the size.
  const std::vector<int64_t>& patch = experts[0].patch_size;
  const int64_t s = vae.scale_factor_spatial, ts = vae.scale_factor_temporal;
  const int64_t multiple = s * std::max(patch[1], patch[2]);
  if (width <= 0 || height <= 0 || width > kWanMaxSide || height > kWanMaxSide ||
      width % multiple != 0 || height % multiple != 0) {
    return invalid_argument("--width and --height must be multiples of " +
                            std::to_string(multiple) + " (the VAE's " + std::to_string(s) +
                            "x times the transformer's patch) up to " +
                            std::to_string(kWanMaxSide) + "; got " + std::to_string(width) + "x" +
                            std::to_string(height));
  }
  if (frames < 1 || frames > kWanMaxFrames || (frames - 1) % ts != 0) {
    return invalid_argument("--num-frames must be " + std::to_string(ts) + "k + 1 (the VAE keeps " +
                            "the first frame and compresses the rest " + std::to_string(ts) +
                            "x), 1 to " + std::to_string(kWanMaxFrames) + "; got " +
                            std::to_string(frames));
  }
  if (max_sequence_length < 1 || max_sequence_length > WanTextEncoder::kMaxSequenceLength) {
    return invalid_argument("--max-sequence-length must be 1 to " +
                            std::to_string(WanTextEncoder::kMaxSequenceLength));
  }
  const int64_t t = (frames - 1) / ts + 1, h = height / s, w = width / s;
  if (t % patch[0] != 0) {
    return invalid_argument(std::to_string(t) + " latent frames are not a multiple of the " +
                            "transformer's temporal patch " + std::to_string(patch[0]));
  }
  pm.latent_shape = {vae.z_dim, t, h, w};
  pm.n_img = (t / patch[0]) * (h / patch[1]) * (w / patch[2]);
  for (const WanTransformerConfig& c : experts) {
    pm.activations_batch1 = std::max(
        pm.activations_batch1, wan_transformer_activation_bytes(c, 1, pm.n_img, pm.n_txt, threads));
    pm.activations_batch2 = std::max(
        pm.activations_batch2, wan_transformer_activation_bytes(c, 2, pm.n_img, pm.n_txt, threads));
  }
  pm.vae_decode = wan_vae_decode_peak_bytes(vae, t, h, w, threads);
  return pm;
}

std::string components_table(const PipelineMemory& m) {
  std::string out =
      "| component | sized from | weights | parameters | linears (quantized) | resident | as bf16 "
      "|\n|---|---|---|---:|---:|---:|---:|\n";
  char buf[512];
  for (const ComponentMemory& c : m.components) {
    std::snprintf(buf, sizeof(buf), "| %s | %s | %s | %s | %lld (%lld) | %s | %s |\n",
                  c.name.c_str(), c.source.c_str(), c.scheme.empty() ? "-" : c.scheme.c_str(),
                  params_text(c.params).c_str(), static_cast<long long>(c.linears),
                  static_cast<long long>(c.quantized_linears), bytes_text(c.resident).c_str(),
                  bytes_text(c.as_bf16).c_str());
    out += buf;
  }
  return out;
}

nlohmann::json components_json(const PipelineMemory& m) {
  nlohmann::json comps = nlohmann::json::array();
  for (const ComponentMemory& c : m.components) {
    comps.push_back({{"name", c.name},
                     {"sized_from", c.source},
                     {"weights", c.scheme},
                     {"parameters", c.params},
                     {"linears", c.linears},
                     {"quantized_linears", c.quantized_linears},
                     {"resident_bytes", c.resident},
                     {"bf16_bytes", c.as_bf16}});
  }
  return comps;
}

std::string video_memory_text(const PipelineMemory& m) {
  std::string out = components_table(m);
  std::string latent;
  for (int64_t d : m.latent_shape) latent += (latent.empty() ? "" : ", ") + std::to_string(d);
  char buf[1024];
  std::snprintf(
      buf, sizeof(buf),
      "resident weights: %s (every expert)\n"
      "denoising step at %lldx%lld, %lld frames (latents [%s]; %lld video + %lld text tokens): "
      "transformer activations %s for one branch, %s for CFG's batch of 2\n"
      "peak of a step (weights + activations): %s with CFG (guidance > 1, the default), %s "
      "without\n"
      "VAE decode of the %lld frames: %s working set (the video as f32 included); peak "
      "(weights + decode) %s\n",
      bytes_text(m.weights()).c_str(), static_cast<long long>(m.width),
      static_cast<long long>(m.height), static_cast<long long>(m.frames), latent.c_str(),
      static_cast<long long>(m.n_img), static_cast<long long>(m.n_txt),
      bytes_text(m.activations_batch1).c_str(), bytes_text(m.activations_batch2).c_str(),
      bytes_text(m.peak(true)).c_str(), bytes_text(m.peak(false)).c_str(),
      static_cast<long long>(m.frames), bytes_text(m.vae_decode).c_str(),
      bytes_text(m.decode_peak()).c_str());
  return out + buf;
}

}  // namespace pipeline_mem
}  // namespace

size_t PipelineMemory::weights() const {
  size_t total = 0;
  for (const ComponentMemory& c : components) total += c.resident;
  return total;
}

size_t PipelineMemory::peak(bool true_cfg) const {
  return weights() + (true_cfg ? activations_batch2 : activations_batch1);
}

// Defaults as the pipelines': FLUX.1 a 1024x1024 image, Wan2.2 an 832x480 video of 81 frames.
Result<PipelineMemory> flux_pipeline_memory(const PipelineIndex& index, const MemoryQuery& q) {
  QS_ASSIGN_OR_RETURN(
      PipelineMemory pm,
      pipeline_mem::flux_memory(index.dir, true, q.width > 0 ? q.width : 1024,
                                q.height > 0 ? q.height : 1024, q.max_sequence_length, q.threads));
  pm.class_name = index.class_name;
  return pm;
}

Result<PipelineMemory> wan_pipeline_memory(const PipelineIndex& index, const MemoryQuery& q) {
  const WanRequest d;  // the pipeline's defaults
  return pipeline_mem::wan_memory(
      index, q.width > 0 ? q.width : d.width, q.height > 0 ? q.height : d.height,
      q.num_frames > 0 ? q.num_frames : d.num_frames, q.max_sequence_length, q.threads);
}

Result<PipelineMemory> pipeline_memory(const std::string& dir, const MemoryQuery& query) {
  if (!is_pipeline_dir(dir)) {
    return pipeline_mem::flux_memory(dir, false, query.width > 0 ? query.width : 1024,
                                     query.height > 0 ? query.height : 1024,
                                     query.max_sequence_length, query.threads);
  }
  QS_ASSIGN_OR_RETURN(const PipelineIndex index, read_pipeline_index(dir));
  return index.family->memory(index, query);
}

Result<PipelineMemory> pipeline_memory(const std::string& dir, int64_t width, int64_t height,
                                       int64_t max_sequence_length, int threads,
                                       int64_t num_frames) {
  MemoryQuery q;
  q.width = width, q.height = height, q.num_frames = num_frames;
  q.max_sequence_length = max_sequence_length, q.threads = threads;
  return pipeline_memory(dir, q);
}

std::string pipeline_memory_text(const PipelineMemory& m) {
  using namespace pipeline_mem;
  if (m.family->output == PipelineOutput::kVideo) return video_memory_text(m);
  std::string out = components_table(m);
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "resident weights: %s (absent components not counted)\n"
                "transformer activations at %lldx%lld (%lld image + %lld text tokens): %s a "
                "forward, %s for true CFG's batch of 2\n"
                "peak (weights + one step): %s; with true CFG %s (the VAE decode's own working "
                "set is not included)\n",
                bytes_text(m.weights()).c_str(), static_cast<long long>(m.width),
                static_cast<long long>(m.height), static_cast<long long>(m.n_img),
                static_cast<long long>(m.n_txt), bytes_text(m.activations_batch1).c_str(),
                bytes_text(m.activations_batch2).c_str(), bytes_text(m.peak(false)).c_str(),
                bytes_text(m.peak(true)).c_str());
  return out + buf;
}

nlohmann::json pipeline_memory_json(const PipelineMemory& m) {
  using namespace pipeline_mem;
  if (m.family->output == PipelineOutput::kVideo) {
    return {{"pipeline", m.class_name},
            {"components", components_json(m)},
            {"width", m.width},
            {"height", m.height},
            {"frames", m.frames},
            {"latent_shape", m.latent_shape},
            {"video_tokens", m.n_img},
            {"text_tokens", m.n_txt},
            {"resident_weight_bytes", m.weights()},
            {"activation_bytes", m.activations_batch1},
            {"activation_bytes_cfg", m.activations_batch2},
            {"step_peak_bytes", m.peak(false)},
            {"step_peak_bytes_cfg", m.peak(true)},
            {"vae_decode_bytes", m.vae_decode},
            {"vae_decode_peak_bytes", m.decode_peak()},
            {"peak_bytes", std::max(m.peak(true), m.decode_peak())}};
  }
  return {{"components", components_json(m)},
          {"width", m.width},
          {"height", m.height},
          {"image_tokens", m.n_img},
          {"text_tokens", m.n_txt},
          {"resident_weight_bytes", m.weights()},
          {"activation_bytes", m.activations_batch1},
          {"activation_bytes_true_cfg", m.activations_batch2},
          {"peak_bytes", m.peak(false)},
          {"peak_bytes_true_cfg", m.peak(true)}};
}

}  // namespace qs::diffusion
