// golden: a W4A16 FLUX transformer. `quantize` on the tiny pipeline (RTN, int4 g32 sym, as
// auto_round) writes a pipeline whose transformer blocks are GPTQ-packed with auto-round's
// quantization_config (block_name_to_quantize "transformer_blocks,single_transformer_blocks")
// and whose other components are the source's. Loaded with no flag, that transformer runs on
// the packed kernels and gives what the same transformer with the RTN weights dequantized (an
// f32 checkpoint, computed here from the source weights with formats::rtn_quantize, not by
// unpacking what was written) gives; the whole pipeline's image stays close to the 16-bit
// one's (compare-images). Tuned modes and other formats are refused with the reason.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "core/json.h"
#include "diffusion/flux_transformer.h"
#include "diffusion/pipeline_memory.h"
#include "flux_reference.h"
#include "formats/rtn.h"
#include "io/checkpoint.h"
#include "models/component.h"
#include "ops/linear.h"
#include "ops/quant_matrix.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

class FluxW4A16 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("qs_flux_w4a16_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    quantized_ = (dir_ / "w4g32").string();
    auto r = run_cli("quantize --model " + testing::kFluxPipeline + " --output_dir " + quantized_ +
                     " --iters 0 --disable_opt_rtn --group_size 32 --threads 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    summary_ = r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static fs::path dir_;
  static std::string quantized_;
  static std::string summary_;
};
fs::path FluxW4A16::dir_;
std::string FluxW4A16::quantized_;
std::string FluxW4A16::summary_;

bool in_block(const std::string& name) {
  return name.rfind("transformer_blocks.", 0) == 0 ||
         name.rfind("single_transformer_blocks.", 0) == 0;
}

TEST_F(FluxW4A16, WritesAnAutoRoundTransformerAndCarriesTheRest) {
  // 14 linears in the double block, 6 in the single one; the embedders, norm_out and proj_out
  // stay 16-bit, as auto-round leaves them.
  EXPECT_NE(summary_.find("| 20 | 10 |"), std::string::npos) << summary_;
  EXPECT_NE(summary_.find("kept 16-bit (outside the blocks): 10 layers"), std::string::npos);
  auto config = read_json(quantized_ + "/transformer/config.json");
  ASSERT_TRUE(config.ok());
  const auto& qc = (*config)["quantization_config"];
  EXPECT_EQ(qc["quant_method"], "auto-round");
  EXPECT_EQ(qc["packing_format"], "auto_round:auto_gptq");
  EXPECT_EQ(qc["block_name_to_quantize"], "transformer_blocks,single_transformer_blocks");
  EXPECT_EQ(qc["bits"], 4);
  EXPECT_EQ(qc["group_size"], 32);
  auto ckpt = io::Checkpoint::open(quantized_ + "/transformer", "diffusion_pytorch_model");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_TRUE(ckpt->has("transformer_blocks.0.attn.to_q.qweight"));
  EXPECT_TRUE(ckpt->has("transformer_blocks.0.attn.to_q.bias"));
  EXPECT_TRUE(ckpt->has("single_transformer_blocks.0.proj_out.scales"));
  EXPECT_FALSE(ckpt->has("transformer_blocks.0.attn.to_q.weight"));
  EXPECT_TRUE(ckpt->has("x_embedder.weight"));
  EXPECT_TRUE(ckpt->has("proj_out.weight"));
  for (const char* c : {"model_index.json", "scheduler/scheduler_config.json",
                        "text_encoder/config.json", "text_encoder_2/config.json",
                        "tokenizer/tokenizer.json", "vae/diffusion_pytorch_model.safetensors"}) {
    EXPECT_TRUE(fs::exists(fs::path(quantized_) / c)) << c;
  }
}

TEST_F(FluxW4A16, RunsAsTheDequantizedRtnWeights) {
  // The reference: the source transformer with every block linear replaced by its RTN
  // dequantization, as f32, and no quantization_config.
  const fs::path ref_dir = dir_ / "dequantized";
  fs::create_directories(ref_dir);
  const std::string src = testing::kFluxPipeline + "/transformer";
  fs::copy_file(src + "/config.json", ref_dir / "config.json");
  auto ckpt = io::Checkpoint::open(src, "diffusion_pytorch_model");
  ASSERT_TRUE(ckpt.ok());
  std::vector<std::pair<std::string, Tensor>> tensors;
  int replaced = 0;
  for (const std::string& name : ckpt->names()) {
    const Tensor t = ckpt->get(name).value();
    std::vector<float> v = t.to_f32();
    if (t.shape.size() == 2 && name.ends_with(".weight") && in_block(name)) {
      const formats::QuantizedWeight q =
          formats::rtn_quantize(v.data(), t.shape[0], t.shape[1], 4, 32, true);
      formats::dequantize(q, v.data());
      ++replaced;
    }
    tensors.emplace_back(name, Tensor::from_f32(DType::kF32, t.shape, v));
  }
  EXPECT_EQ(replaced, 20);
  ASSERT_TRUE(
      io::write_safetensors((ref_dir / "diffusion_pytorch_model.safetensors").string(), tensors)
          .ok());

  auto quant = diffusion::FluxTransformer::load(quantized_ + "/transformer");
  ASSERT_TRUE(quant.ok()) << quant.status().to_string();
  auto dense = diffusion::FluxTransformer::load(ref_dir.string());
  ASSERT_TRUE(dense.ok()) << dense.status().to_string();
  testing::FluxReference ref;
  const testing::FluxReferenceInputs inputs(ref);
  const diffusion::FluxInputs in = inputs.view();
  ThreadPool pool(2);
  std::vector<float> a(64 * 16), b(64 * 16);
  // bf16 activations with exact products: the W4A16 arithmetic of diffusers and vLLM-Omni.
  const ops::ActivationPrecision saved = ops::activation_precision();
  ops::set_activation_precision(ops::ActivationPrecision::kBf16);
  ASSERT_TRUE(quant->forward(in, a.data(), pool).ok());
  ops::set_activation_precision(saved);
  ASSERT_TRUE(dense->forward(in, b.data(), pool).ok());
  // What differs is the rounding of each linear's input to bf16 (2^-9 relative).
  testing::expect_close(a, b, 2e-3f, 1e-2f, "W4A16 transformer vs dequantized f32");
  // And the quantization did change the output (the comparison is not of a model with itself).
  const std::vector<float> orig = ref.f32("xf_out");
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, double(std::fabs(a[i] - orig[i])));
  EXPECT_GT(diff, 1e-3);
}

TEST_F(FluxW4A16, ImageStaysCloseToTheSixteenBitPipeline) {
  const std::string prompts = (dir_ / "prompts.txt").string();
  std::ofstream(prompts) << "a photograph of an astronaut riding a horse\nA cat in a hat\n";
  auto r = run_cli("compare-images --reference " + testing::kFluxPipeline + " --candidate " +
                       quantized_ + " --prompts " + prompts +
                       " --seed 0 --steps 4 --width 64 --height 64 --max-sequence-length 32",
                   false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto report = nlohmann::json::parse(r.output);
  for (const auto& p : report["per_prompt"]) {
    EXPECT_FALSE(p["identical"].get<bool>());  // the transformer did change
    // vLLM-Omni's strict thresholds (reference/omni-diffusion.md §2): 30 dB, cosine 0.995;
    // measured 56 dB and 0.99999 on this random-init pipeline.
    EXPECT_GT(p["psnr_db"].get<double>(), 30.0);
    EXPECT_GT(p["latent_cosine_similarity"].get<double>(), 0.995);
  }
}

TEST_F(FluxW4A16, RefusesWhatItCannotDo) {
  const std::string out = (dir_ / "refused").string();
  auto tuned = run_cli("quantize --model " + testing::kFluxPipeline + " --output_dir " + out);
  EXPECT_NE(tuned.exit_code, 0);
  EXPECT_NE(tuned.output.find("--iters 0 --disable_opt_rtn"), std::string::npos) << tuned.output;
  auto gptq = run_cli("quantize --model " + testing::kFluxPipeline + " --output_dir " + out +
                      " --iters 0 --disable_opt_rtn --format auto_gptq");
  EXPECT_NE(gptq.exit_code, 0);
  EXPECT_NE(gptq.output.find("auto_round"), std::string::npos) << gptq.output;
  auto again = run_cli("quantize --model " + quantized_ + " --output_dir " + out +
                       " --iters 0 --disable_opt_rtn --group_size 32");
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.output.find("already quantized"), std::string::npos) << again.output;
  EXPECT_FALSE(fs::exists(out));
}

// tiny_autoround_w4g32: the same transformer quantized by the real auto-round (SignRound,
// int4 g32 sym; scripts/golden/gen_flux_autoround_fixture.py) and run by diffusers through
// auto-round's backends.
const fs::path kAutoRound = testing::kFluxFixtures / "tiny_autoround_w4g32";

std::vector<float> reference(const std::string& name) {
  auto file = MappedFile::open((kAutoRound / "reference.safetensors").string());
  QS_CHECK(file.ok());
  std::vector<std::pair<std::string, Tensor>> tensors;
  QS_CHECK(io::read_safetensors(*file, &tensors, nullptr).ok());
  for (auto& [n, t] : tensors) {
    if (n == name) return t.to_f32();
  }
  ADD_FAILURE() << name << " not in the fixture";
  return {};
}

TEST(FluxAutoRound, WeightsAreTheToolsDequantization) {
  auto c = models::Component::open((kAutoRound / "transformer").string());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c->quantization().quantized());
  ThreadPool pool(1);
  const ops::ActivationPrecision saved = ops::activation_precision();
  ops::set_activation_precision(ops::ActivationPrecision::kBf16);  // one-hot rows stay exact
  for (const auto& [module, n, k] : std::vector<std::tuple<std::string, int64_t, int64_t>>{
           {"transformer_blocks.0.attn.to_q", 32, 32},
           {"single_transformer_blocks.0.proj_out", 32, 160}}) {
    auto w = c->linear(module, n, k, nullptr);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    ASSERT_NE(w->quant, nullptr) << module << " should be packed int4";
    // Rows of the identity through the layer give W^T, as the generator took the tool's.
    std::vector<float> eye(k * k, 0.0f), wt(k * n);
    for (int64_t i = 0; i < k; ++i) eye[i * k + i] = 1.0f;
    ASSERT_TRUE(ops::linear(eye.data(), k, *w, nullptr, wt.data(), pool).ok());
    std::vector<float> got(n * k);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t col = 0; col < k; ++col) got[r * k + col] = wt[col * n + r];
    }
    testing::expect_close(got, reference("dequant." + module), 1e-6f, 1e-5f, module);
  }
  ops::set_activation_precision(saved);
}

TEST(FluxAutoRound, TransformerMatchesDiffusers) {
  auto model = diffusion::FluxTransformer::load((kAutoRound / "transformer").string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  testing::FluxReference ref;
  const testing::FluxReferenceInputs inputs(ref);
  const diffusion::FluxInputs in = inputs.view();
  ThreadPool pool(2);
  const std::vector<float> want = reference("xf_out_torch");
  const ops::ActivationPrecision saved = ops::activation_precision();
  for (const auto& [precision, atol, rtol] :
       std::vector<std::tuple<ops::ActivationPrecision, float, float>>{
           // bf16 rounding of each linear's input (2^-9) against the tool's f32.
           {ops::ActivationPrecision::kBf16, 2e-3f, 1e-2f},
           // The default int8 rounding per 32 inputs (2^-8 of each block's max).
           {ops::ActivationPrecision::kInt8, 5e-3f, 2e-2f}}) {
    ops::set_activation_precision(precision);
    std::vector<float> out(64 * 16);
    ASSERT_TRUE(model->forward(in, out.data(), pool).ok());
    testing::expect_close(out, want, atol, rtol,
                          std::string("vs diffusers + auto-round, activations ") +
                              ops::activation_precision_name(precision));
  }
  ops::set_activation_precision(saved);
}

TEST(FluxAutoRound, PipelineImageAgainstTheSixteenBitOne) {
  const fs::path dir =
      fs::temp_directory_path() / ("qs_flux_autoround_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path pipe = dir / "pipe";
  fs::copy(testing::kFluxPipeline, pipe, fs::copy_options::recursive);
  fs::remove_all(pipe / "transformer");
  fs::copy(kAutoRound / "transformer", pipe / "transformer", fs::copy_options::recursive);
  const std::string prompts = (dir / "prompts.txt").string();
  std::ofstream(prompts) << "a photograph of an astronaut riding a horse\nA cat in a hat\n";
  auto r = run_cli("compare-images --reference " + testing::kFluxPipeline + " --candidate " +
                       pipe.string() + " --prompts " + prompts +
                       " --seed 0 --steps 4 --width 64 --height 64 --max-sequence-length 32",
                   false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto report = nlohmann::json::parse(r.output);
  for (const auto& p : report["per_prompt"]) {
    EXPECT_FALSE(p["identical"].get<bool>());
    EXPECT_GT(p["psnr_db"].get<double>(), 30.0);
    EXPECT_GT(p["latent_cosine_similarity"].get<double>(), 0.995);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qs

namespace qs {
namespace {

// inspect sizes a transformer from its config: the tensor list must be the one load reads and
// the checkpoint holds, and the resident bytes it predicts for a quantized linear the bytes
// the loaded one holds.
TEST(FluxMemory, TensorSpecsAreTheCheckpointsTensors) {
  auto c = models::Component::open(testing::kFluxPipeline + "/transformer");
  ASSERT_TRUE(c.ok());
  auto config = diffusion::read_flux_config(*c);
  ASSERT_TRUE(config.ok());
  std::map<std::string, std::vector<int64_t>> want, got;
  for (const std::string& name : c->checkpoint().names()) {
    want[name] = c->checkpoint().get(name).value().shape;
  }
  for (const auto& t : diffusion::flux_tensor_specs(*config)) got[t.name] = t.shape;
  EXPECT_EQ(got, want);
}

TEST(FluxMemory, PredictedResidentBytesAreTheLoadedOnes) {
  const fs::path dir = kAutoRound / "transformer";
  auto c = models::Component::open(dir.string());
  ASSERT_TRUE(c.ok());
  auto config = diffusion::read_flux_config(*c);
  ASSERT_TRUE(config.ok());
  size_t predicted = 0, loaded = 0;
  int linears = 0;
  for (const auto& t : diffusion::flux_tensor_specs(*config)) {
    if (t.shape.size() != 2) continue;
    const std::string module = t.name.substr(0, t.name.size() - 7);
    const formats::QuantScheme scheme = c->quantization().scheme_for(module);
    if (!scheme.quantized()) continue;
    auto w = c->linear(module, t.shape[0], t.shape[1], nullptr);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    predicted += ops::QuantMatrix::resident_bytes_for(scheme, t.shape[0], t.shape[1]);
    loaded += w->resident_bytes();
    ++linears;
  }
  EXPECT_EQ(linears, 20);
  EXPECT_EQ(predicted, loaded);
}

// FLUX.1-dev's transformer from its config alone (fixtures/flux/flux1_dev_shapes: the public
// config, and the same with the seed's AutoRound W4A16 quantization_config).
TEST(FluxMemory, Flux1DevShapesFromTheConfig) {
  const fs::path shapes = testing::kFluxFixtures / "flux1_dev_shapes";
  auto bf16 =
      diffusion::pipeline_memory((shapes / "bf16/transformer").string(), 1024, 1024, 512, 2);
  auto w4 = diffusion::pipeline_memory((shapes / "w4a16/transformer").string(), 1024, 1024, 512, 2);
  ASSERT_TRUE(bf16.ok()) << bf16.status().to_string();
  ASSERT_TRUE(w4.ok()) << w4.status().to_string();
  const diffusion::ComponentMemory& a = bf16->components[0];
  const diffusion::ComponentMemory& b = w4->components[0];
  // diffusers 0.42.1: sum(p.numel()) of FluxTransformer2DModel(**config) on the meta device,
  // 504 two-dimensional parameters, 494 of them under the two block lists.
  EXPECT_EQ(a.params, 11901408320);
  EXPECT_EQ(a.linears, 504);
  EXPECT_EQ(a.quantized_linears, 0);
  EXPECT_EQ(b.params, a.params);
  EXPECT_EQ(b.quantized_linears, 494);
  EXPECT_EQ(a.as_bf16, size_t{2} * 11901408320);
  // int4 codes plus an f32 scale per 128 inputs: a little over a quarter of bf16.
  EXPECT_GT(b.resident, a.resident / 4);
  EXPECT_LT(b.resident, a.resident * 3 / 10);
  // 4096 image tokens (1024 / 16 squared) and 512 text tokens.
  EXPECT_EQ(bf16->n_img, 4096);
  EXPECT_GT(bf16->activations_batch2, bf16->activations_batch1);
  EXPECT_EQ(bf16->peak(false), a.resident + bf16->activations_batch1);
  EXPECT_FALSE(
      diffusion::pipeline_memory((shapes / "bf16/transformer").string(), 1000, 1024, 512, 2)
          .ok());  // not a multiple of 16
}

}  // namespace
}  // namespace qs
