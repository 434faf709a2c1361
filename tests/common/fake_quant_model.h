// tests: the "fake-quant" model of a tuned run: the source checkpoint with every tuned linear
// replaced by its dequantized weight (f32), everything else copied. It is the dense model the
// tuner optimised, i.e. what the auto-round tool holds in memory after quantize() and what a
// quantized checkpoint of the same weights must reproduce.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "formats/layouts.h"
#include "io/checkpoint.h"
#include "quant/pipeline.h"

namespace qs::testing {

inline void write_fake_quant(const std::string& src, const quant::TunedModel& tuned,
                             const std::string& out) {
  namespace fs = std::filesystem;
  fs::create_directories(out);
  io::Checkpoint ckpt = io::Checkpoint::open(src).value();
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : ckpt.names()) {
    const std::string module = name.substr(0, name.size() - std::string(".weight").size());
    auto it = tuned.weights.find(module);
    if (!name.ends_with(".weight") || it == tuned.weights.end()) {
      tensors.emplace_back(name, ckpt.get(name).value());
      continue;
    }
    Tensor t = Tensor::zeros(DType::kF32, {it->second.n, it->second.k});
    formats::dequantize(it->second, t.mutable_ptr<float>());
    tensors.emplace_back(name, std::move(t));
  }
  ASSERT_TRUE(io::write_safetensors(out + "/model.safetensors", tensors, {{"format", "pt"}}).ok());
  for (const auto& e : fs::directory_iterator(src)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && !name.ends_with(".safetensors") &&
        name != "model.safetensors.index.json") {
      fs::copy_file(e.path(), fs::path(out) / name);
    }
  }
}

}  // namespace qs::testing
