// tests: a copy of a tied checkpoint (models/stories260K) with its head written out as an
// lm_head.weight of its own and tie_word_embeddings false. The values are the same, so its
// logits are the tied model's, but --quant_lm_head is then allowed (the tool refuses a tied
// head). scripts/golden/gen_autoround_golden.py unties the same way for the tool's run.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "io/checkpoint.h"

namespace qs::testing {

inline void write_untied(const std::string& src, const std::string& out) {
  namespace fs = std::filesystem;
  fs::create_directories(out);
  io::Checkpoint ckpt = io::Checkpoint::open(src).value();
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : ckpt.names()) tensors.emplace_back(name, *ckpt.get(name));
  tensors.emplace_back("lm_head.weight", *ckpt.get("model.embed_tokens.weight"));
  ASSERT_TRUE(io::write_safetensors(out + "/model.safetensors", tensors, {{"format", "pt"}}).ok());
  nlohmann::json config = nlohmann::json::parse(slurp(src + "/config.json"));
  config["tie_word_embeddings"] = false;
  std::ofstream(out + "/config.json") << config.dump();
  for (const auto& e : fs::directory_iterator(src)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && !name.ends_with(".safetensors") && name != "config.json")
      fs::copy_file(e.path(), fs::path(out) / name);
  }
}

}  // namespace qs::testing
