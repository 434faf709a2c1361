// diffusion: the registry of pipeline families (see pipeline_registry.h).
#include "diffusion/pipeline_registry.h"

#include "diffusion/flux_pipeline.h"
#include "diffusion/pipeline_memory.h"
#include "diffusion/wan_pipeline.h"

namespace qs::diffusion {

const std::vector<PipelineFamilySpec>& pipeline_families() {
  static const std::vector<PipelineFamilySpec> families = {
      {"FLUX.1",
       "flux",
       {"FluxPipeline"},
       PipelineOutput::kImage,
       {{"FluxTransformer2DModel", {"transformer_blocks", "single_transformer_blocks"}}},
       "generate-image",
       load_flux_pipeline,
       flux_pipeline_memory},
      {"Wan2.2",
       "wan",
       {"WanPipeline", "WanImageToVideoPipeline"},
       PipelineOutput::kVideo,
       {{"WanTransformer3DModel", {"blocks"}}},
       "generate-video",
       load_wan_pipeline,
       wan_pipeline_memory},
  };
  return families;
}

const PipelineFamilySpec* family_for_class(const std::string& class_name) {
  for (const PipelineFamilySpec& f : pipeline_families()) {
    for (const std::string& c : f.pipeline_classes) {
      if (c == class_name) return &f;
    }
  }
  return nullptr;
}

const std::vector<std::string>* transformer_block_lists(const std::string& transformer_class) {
  for (const PipelineFamilySpec& f : pipeline_families()) {
    for (const auto& [cls, blocks] : f.transformer_blocks) {
      if (cls == transformer_class) return &blocks;
    }
  }
  return nullptr;
}

std::string known_pipeline_classes() {
  std::vector<std::string> all;
  for (const PipelineFamilySpec& f : pipeline_families()) {
    all.insert(all.end(), f.pipeline_classes.begin(), f.pipeline_classes.end());
  }
  std::string out;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i > 0) out += i + 1 == all.size() ? " and " : ", ";
    out += all[i];
  }
  return out;
}

}  // namespace qs::diffusion
