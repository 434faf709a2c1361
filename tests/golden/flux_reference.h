// tests: the FLUX.1 golden fixtures (tests/golden/fixtures/flux, made by
// scripts/golden/gen_flux_fixtures.py with diffusers): the tiny pipeline's directory and the
// reference tensors diffusers computed, read from reference.safetensors.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "../common/reference_tensors.h"
#include "diffusion/flux_transformer.h"
#include "io/checkpoint.h"

namespace qs::testing {

inline const std::filesystem::path kFluxFixtures =
    std::filesystem::path(QS_SOURCE_DIR) / "tests/golden/fixtures/flux";
inline const std::string kFluxPipeline = (kFluxFixtures / "tiny_pipeline").string();

class FluxReference : public ReferenceTensors {
 public:
  FluxReference() : ReferenceTensors(kFluxFixtures / "reference.safetensors") {}
};

// The inputs of the reference's one transformer forward (xf_*: 64 image and 8 text tokens,
// timestep 0.7 and guidance 3.5 as reference.json "transformer" says), `batch` copies.
struct FluxReferenceInputs {
  std::vector<float> img, txt, pooled, img_ids, txt_ids, t, g;
  explicit FluxReferenceInputs(const FluxReference& ref, int batch = 1) {
    auto append = [](std::vector<float>* dst, const std::vector<float>& src) {
      dst->insert(dst->end(), src.begin(), src.end());
    };
    for (int b = 0; b < batch; ++b) {
      append(&img, ref.f32("xf_hidden_in"));
      append(&txt, ref.f32("xf_encoder_in"));
      append(&pooled, ref.f32("xf_pooled_in"));
      t.push_back(0.7f);
      g.push_back(3.5f);
    }
    img_ids = ref.f32("xf_img_ids");
    txt_ids = ref.f32("xf_txt_ids");
  }
  diffusion::FluxInputs view(int batch = 1) const {
    return {batch,         64,       8,        img.data(),     txt.data(),
            pooled.data(), t.data(), g.data(), img_ids.data(), txt_ids.data()};
  }
};

// Every |got - want| <= atol + rtol * |want|; reports the worst element and the count off.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, float atol,
                         float rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, worst = 0;
  float worst_err = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float err = std::fabs(got[i] - want[i]);
    if (!(err <= atol + rtol * std::fabs(want[i]))) ++bad;
    if (!(err <= worst_err)) worst_err = err, worst = i;
  }
  std::printf("%s: max |err| %.3g over %zu values\n", what.c_str(), worst_err, got.size());
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " off; worst at " << worst
                     << ": got " << got[worst] << " want " << want[worst];
}

}  // namespace qs::testing
