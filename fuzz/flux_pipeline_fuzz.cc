// fuzz: a FLUX.1 pipeline directory as diffusers lays it out, with every JSON file of it taken
// from the input (model_index.json, the scheduler's, five components' config.json, the two
// tokenizer.json) over the tiny pipeline's real weights, then an image request. An empty part
// stands for the fixture's own file, so a mutation can reach one file with the rest intact.
// Loading must refuse every config the weights do not fit with an error; a request is
// validated, and one small enough to be cheap is run to the image.
#include <unistd.h>

#include <cstdint>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "diffusion/flux_pipeline.h"
#include "fuzz_util.h"

namespace {

namespace fs = std::filesystem;

const char* const kFixture = QS_SOURCE_DIR "/tests/golden/fixtures/flux/tiny_pipeline";

// The pipeline's JSON files, in the order of the input's parts; the last part is the request.
const char* const kFiles[] = {"model_index.json",         "scheduler/scheduler_config.json",
                              "transformer/config.json",  "vae/config.json",
                              "text_encoder/config.json", "text_encoder_2/config.json",
                              "tokenizer/tokenizer.json", "tokenizer_2/tokenizer.json"};
constexpr size_t kNumFiles = sizeof(kFiles) / sizeof(kFiles[0]);

const char* const kWeights[] = {
    "transformer/diffusion_pytorch_model.safetensors", "vae/diffusion_pytorch_model.safetensors",
    "text_encoder/model.safetensors", "text_encoder_2/model.safetensors"};

template <typename T>
T field(const nlohmann::json& j, const char* key, T fallback) {
  if (!j.is_object() || !j.contains(key)) return fallback;
  const auto& v = j[key];
  if constexpr (std::is_same_v<T, std::string>) {
    return v.is_string() ? v.get<std::string>() : fallback;
  } else if constexpr (std::is_floating_point_v<T>) {
    return v.is_number() ? v.get<T>() : fallback;
  } else {
    return v.is_number_integer() ? v.get<T>() : fallback;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const qs::fuzz::Scratch scratch;
  static qs::ThreadPool pool(1);
  scratch.reset();
  const std::vector<std::string> parts = qs::fuzz::split(data, size, kNumFiles + 1);
  const fs::path dir(scratch.dir());
  for (const char* sub : {"scheduler", "transformer", "vae", "text_encoder", "text_encoder_2",
                          "tokenizer", "tokenizer_2"}) {
    fs::create_directories(dir / sub);
  }
  for (const char* w : kWeights) fs::create_symlink(fs::path(kFixture) / w, dir / w);
  for (size_t i = 0; i < kNumFiles; ++i) {
    if (parts[i].empty()) {
      fs::create_symlink(fs::path(kFixture) / kFiles[i], dir / kFiles[i]);
    } else {
      scratch.write(kFiles[i], parts[i]);
    }
  }
  auto pipe = qs::diffusion::FluxPipeline::load(scratch.dir());
  if (!pipe.ok()) return 0;

  const nlohmann::json r = nlohmann::json::parse(parts[kNumFiles], nullptr, false);
  qs::diffusion::FluxRequest req;
  req.prompt = field<std::string>(r, "prompt", "a photograph of an astronaut riding a horse");
  req.negative_prompt = field<std::string>(r, "negative_prompt", "");
  req.width = field<int64_t>(r, "width", 16);
  req.height = field<int64_t>(r, "height", 16);
  req.steps = field<int64_t>(r, "steps", 1);
  req.guidance_scale = field<double>(r, "guidance_scale", 3.5);
  req.true_cfg_scale = field<double>(r, "true_cfg_scale", 1.0);
  req.max_sequence_length = field<int64_t>(r, "max_sequence_length", 8);
  req.seed = field<uint64_t>(r, "seed", 0);
  int64_t n_img = 0, channels = 0;
  if (!(*pipe)->latent_shape(req, &n_img, &channels).ok()) return 0;
  if (r.is_object() && r.contains("noise") && r["noise"].is_array()) {
    for (const auto& v : r["noise"]) req.noise.push_back(v.is_number() ? v.get<float>() : 0.0f);
  }
  // Run only what costs milliseconds on the tiny weights; larger requests were validated above.
  if (req.width * req.height > 32 * 32 || req.steps > 2 || req.max_sequence_length > 32) return 0;
  auto image = (*pipe)->generate(req, pool);
  if (!image.ok()) return 0;
  QS_CHECK(image->width == req.width && image->height == req.height);
  QS_CHECK(static_cast<int64_t>(image->rgb.size()) == req.width * req.height * 3);
  return 0;
}
