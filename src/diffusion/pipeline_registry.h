// diffusion: the pipeline families quantserve runs, one row each (pipeline_registry.cc), as
// vLLM-Omni maps a model_index.json's _class_name to a registered pipeline. A row says what the
// commands need to know of a family without naming it: the pipeline classes it answers to,
// what it makes, its transformer classes with the block lists auto-round quantizes, how to load
// it and how to size it from its configs. A new family is its pipeline file (a
// DiffusionPipeline), its components and one row here; no command changes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "diffusion/pipeline.h"
#include "diffusion/pipeline_index.h"

namespace qs::diffusion {

struct PipelineMemory;

// What `inspect` sizes: a width x height image, or a video of num_frames.
struct MemoryQuery {
  int64_t width = 0, height = 0;  // 0: the family's default size
  int64_t num_frames = 0;         // videos; 0: the family's default
  int64_t max_sequence_length = 512;
  int threads = 1;
};

struct PipelineFamilySpec {
  const char* name;                           // "FLUX.1", "Wan2.2": what errors and tables call it
  const char* key;                            // "flux", "wan": Python's and JSON's name
  std::vector<std::string> pipeline_classes;  // model_index.json _class_name values
  PipelineOutput output;
  // Each transformer class of the family with the module lists of its blocks, as auto-round's
  // export names them (block_name_to_quantize).
  std::vector<std::pair<std::string, std::vector<std::string>>> transformer_blocks;
  // The command that runs the family's pipelines ("generate-image").
  const char* command;
  Result<std::unique_ptr<DiffusionPipeline>> (*load)(const PipelineIndex& index,
                                                     const PipelineLoadOptions& options);
  // Resident bytes per component, one step's activations (and a video's decode) sized from the
  // configs alone (see pipeline_memory.h).
  Result<PipelineMemory> (*memory)(const PipelineIndex& index, const MemoryQuery& query);
};

const std::vector<PipelineFamilySpec>& pipeline_families();
// The family whose pipeline_classes hold `class_name`; null when none does.
const PipelineFamilySpec* family_for_class(const std::string& class_name);
// The family of a transformer class (FluxTransformer2DModel, WanTransformer3DModel) and its
// block lists; null when no family has it.
const std::vector<std::string>* transformer_block_lists(const std::string& transformer_class);
// "FluxPipeline, WanPipeline and WanImageToVideoPipeline": for errors.
std::string known_pipeline_classes();

}  // namespace qs::diffusion
