// quant: what `quantize` plans for a multimodal checkpoint (see pipeline.h): a decoder with
// towers (Qwen2.5-VL's visual.*, the Qwen2.5-Omni thinker's visual.* and audio_tower.*). Only
// the decoder blocks are quantized, tuned on text alone (the towers never run), as auto-round
// 0.16's MLLM compressor does with its default quant_nontext_module=False; the towers' tensors
// pass through the export unchanged. The quantization_config is the one the tool writes for the
// same run, key for key (tests/golden/fixtures/vl_autoround holds the tool's).
#include <regex>

#include "io/checkpoint.h"
#include "quant/pipeline.h"

namespace qs::quant {

namespace {

bool in_tower(const std::string& name, const models::ModelConfig& config) {
  for (const std::string& p : config.tower_prefixes) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

// A --layer_config key that names a tower tensor: exactly, or as a regex found in its name.
Result<std::string> tower_key(const nlohmann::json& layer_config, const io::Checkpoint& ckpt,
                              const models::ModelConfig& config) {
  for (const auto& [key, value] : layer_config.items()) {
    std::regex re;
    try {
      re = std::regex(key);
    } catch (const std::regex_error& e) {
      return invalid_argument("--layer_config key '" + key + "' is not a valid regex: " + e.what());
    }
    for (const std::string& name : ckpt.names()) {
      if (!in_tower(name, config)) continue;
      const std::string module = name.substr(0, name.rfind('.'));
      if (module == key || std::regex_search(module, re)) return key;
    }
  }
  return std::string();
}

}  // namespace

Result<PlanTarget> multimodal_target(const QuantizeOptions& o, const models::ModelConfig& config,
                                     const io::Checkpoint& ckpt) {
  if (o.format != io::ExportFormat::kAutoRound) {
    return invalid_argument(
        "a multimodal checkpoint (" + config.tower_prefixes[0] +
        "*) is written as --format auto_round only: its block_name_to_quantize keeps the towers "
        "16-bit, which " +
        io::export_format_name(o.format) + " cannot say");
  }
  QS_ASSIGN_OR_RETURN(std::string key, tower_key(o.layer_config, ckpt, config));
  if (!key.empty()) {
    return invalid_argument("--layer_config '" + key +
                            "' names a tower's layer: quantizing the vision or audio tower "
                            "(auto-round's --quant_nontext_module) is not supported; only the "
                            "decoder blocks are quantized");
  }
  PlanTarget target = decoder_target(config);
  const bool model_free = o.iters == 0 && o.disable_opt_rtn;
  if (!model_free) {
    // The tool's in-process run names the blocks as transformers 5 holds them
    // (model.language_model.layers) and as the checkpoint stores them, so that both its
    // readers and the files find them.
    target.blocks = {"model.language_model.layers", "model.layers"};
  }
  // extra_config as the tool writes it. Model-free RTN lists every 2-D weight outside the
  // blocks but the embeddings (lm_head, every tower linear, the audio tower's bos/eos table) as
  // "float"; the in-process run lists the tower linears its shape rule keeps 16-bit (a side
  // not a multiple of 32) as "fp". The latter's keys come out mangled (regexes behind a second
  // '^', which match nothing); we write the plain names.
  target.listed_data_type = model_free ? "float" : "fp";
  for (const std::string& name : ckpt.names()) {
    if (!name.ends_with(".weight")) continue;
    const std::string module = name.substr(0, name.size() - 7);
    const bool head = module == "lm_head" && !o.quant_lm_head;
    if (!head && (!in_tower(name, config) || module.find("embed") != std::string::npos)) continue;
    QS_ASSIGN_OR_RETURN(Tensor t, ckpt.get(name));
    if (t.rank() != 2) continue;
    // The in-process run looks at Linear modules only, and the audio tower's bos/eos table
    // (audio_bos_eos_token) is an embedding.
    const bool table = module.ends_with("_token");
    if (model_free || (!head && !table && !io::int_packable(t.dim(0), t.dim(1)))) {
      target.listed_16bit.push_back(module);
    }
  }
  return target;
}

}  // namespace qs::quant
