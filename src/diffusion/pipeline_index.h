// diffusion: a diffusers pipeline directory as its model_index.json describes it: the pipeline
// class, its named components (text encoders, tokenizers, transformer(s), VAE, scheduler; an
// absent optional one is written [null, null]) and the pipeline-level settings (Wan's
// boundary_ratio, expand_timesteps). Every command that takes a pipeline directory (generate-*,
// serve, quantize, inspect, compare) reads it through here; its family comes from the registry
// (pipeline_registry.h), so a new pipeline family is a row there plus its pipeline and
// component files.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace qs::diffusion {

struct PipelineFamilySpec;

struct PipelineComponent {
  std::string name;        // "transformer", "vae", ...
  std::string library;     // "diffusers", "transformers"
  std::string class_name;  // "WanTransformer3DModel", "UMT5EncoderModel", ...
};

struct PipelineIndex {
  std::string dir;
  std::string class_name;                      // "_class_name"
  const PipelineFamilySpec* family = nullptr;  // never null in a read index
  std::vector<PipelineComponent> components;   // the present ones, by name
  nlohmann::json config;                       // the whole model_index.json

  const PipelineComponent* find(const std::string& name) const;
  bool has(const std::string& name) const { return find(name) != nullptr; }
  // The component's folder, or an error naming the pipeline, the component and what the family
  // needs when it is absent from the index or missing on disk.
  Result<std::string> component_dir(const std::string& name) const;
  // The denoisers present: "transformer" and, for Wan2.2 A14B, "transformer_2".
  std::vector<std::string> transformers() const;
  std::optional<double> number(const std::string& key) const;
  bool flag(const std::string& key) const;  // false when absent
};

// The bytes of the .safetensors files in a component folder: what loading it maps or repacks
// (16-bit weights are views of the files, quantized ones repacked to about their size).
size_t component_weight_bytes(const std::string& component_dir);

// True when `dir` holds a model_index.json (as vLLM-Omni tells a diffusion model apart).
bool is_pipeline_dir(const std::string& dir);

// Reads dir/model_index.json; a class no registered family runs is kUnimplemented naming it
// and the ones we run.
Result<PipelineIndex> read_pipeline_index(const std::string& dir);

}  // namespace qs::diffusion
