// tests: the Wan2.2 golden fixtures (tests/golden/fixtures/wan, made by
// scripts/golden/gen_wan_fixtures.py with diffusers): the three tiny pipelines' directories and
// the reference tensors diffusers computed, read from each reference.safetensors.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "../common/reference_tensors.h"
#include "diffusion/wan_transformer.h"

namespace qs::testing {

inline const std::filesystem::path kWanFixtures =
    std::filesystem::path(QS_SOURCE_DIR) / "tests/golden/fixtures/wan";

// `name`: t2v_a14b, ti2v_5b or i2v_a14b.
inline std::string wan_pipeline(const std::string& name) {
  return (kWanFixtures / name / "pipeline").string();
}

class WanReference : public ReferenceTensors {
 public:
  explicit WanReference(const std::string& name)
      : ReferenceTensors(kWanFixtures / name / "reference.safetensors") {}
};

// The inputs of a fixture's transformer forward (xf_*: latents [1, C, 3, 4, 4], 16 text tokens,
// timestep [1] or per token [1, 12]), `batch` copies; tests change one item to tell them apart.
struct WanReferenceInputs {
  std::vector<float> latents, timestep, text;
  bool per_token = false;
  explicit WanReferenceInputs(const WanReference& ref, int batch = 1) {
    const Tensor& t = ref.at("xf_timestep");
    per_token = t.rank() == 2;
    for (int b = 0; b < batch; ++b) {
      for (auto [name, dst] :
           {std::pair{"xf_hidden_in", &latents}, std::pair{"xf_timestep", &timestep},
            std::pair{"xf_text_in", &text}}) {
        const std::vector<float> v = ref.f32(name);
        dst->insert(dst->end(), v.begin(), v.end());
      }
    }
  }
  diffusion::WanInputs view(int batch = 1) const {
    diffusion::WanInputs in;
    in.batch = batch;
    in.frames = 3, in.height = 4, in.width = 4;
    in.latents = latents.data();
    in.timestep = timestep.data();
    in.per_token_timestep = per_token;
    in.n_text = 16;
    in.text = text.data();
    return in;
  }
};

}  // namespace qs::testing
