// apps: what generate-image and generate-video share over diffusion::DiffusionPipeline: the
// check that a directory holds a pipeline of the command's output, the initial noise read from
// a .safetensors file (how a diffusers run is reproduced from its `latents`), the denoising
// loop with its progress line, and the median of the step times they print.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "diffusion/pipeline.h"

namespace qs::apps {

// generate-video's --steps default (and compare-images --task t2v's), as the command line
// has it; diffusers' WanPipeline defaults to 50, which a request without steps gets elsewhere.
constexpr int64_t kVideoCommandSteps = 40;

// Before anything loads: dir's model_index.json names a family whose pipelines make `want`;
// otherwise an error naming the family and the command that runs it.
Status require_pipeline_output(const std::string& dir, diffusion::PipelineOutput want,
                               const char* command);

// The tensor "noise" of `path` (or its only tensor) as f32: a float tensor of rank `rank`, or
// `rank + 1` with a leading 1 (diffusers' batch of one); `layout` names the shape in the error
// ("[n_img, channels]").
Result<std::vector<float>> read_noise_file(const std::string& path, int rank,
                                           const std::string& layout);
// read_noise_file in the pipeline's latent layout (DiffusionPipeline::latents_dims).
Result<std::vector<float>> read_pipeline_noise(const std::string& path,
                                               const diffusion::DiffusionPipeline& pipeline);

struct GenerationTimes {
  double denoise_seconds = 0, decode_seconds = 0;
};

// denoise then decode of a resolved, validated request, with a progress line per step on a
// terminal ("<command>: step i/n  s/step  elapsed  ETA") on stderr.
Result<diffusion::DiffusionOutput> generate_with_progress(const char* command,
                                                          const diffusion::DiffusionPipeline& pipe,
                                                          diffusion::DiffusionRequest req,
                                                          ThreadPool& pool, GenerationTimes* times);

double median(std::vector<double> v);

}  // namespace qs::apps
