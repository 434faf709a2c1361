// golden: `quantserve inspect` on Wan2.2 pipelines (issue 33). Sized from configs alone, the
// UMT5 encoder's and the VAE's tensor lists are the ones the tiny pipelines' checkpoints hold;
// on those pipelines the resident bytes are what load holds (the f32 pipelines' weight bytes
// exactly, each quantized linear's repacked bytes exactly, within the files' headers of
// WanPipeline's own figure); the step and decode figures are those the server's request check
// uses. On the public Wan2.2 configs (fixtures/wan/wan2_2_shapes, no weights) every
// component's parameters are diffusers' and transformers', the figures grow with size and
// frames, and a W4A16 g128 quantization_config shrinks the experts to about a quarter.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "core/json.h"
#include "diffusion/component_specs.h"
#include "diffusion/pipeline_memory.h"
#include "diffusion/wan_pipeline.h"
#include "diffusion/wan_transformer.h"
#include "flux_reference.h"
#include "models/component.h"
#include "ops/quant_matrix.h"
#include "wan_reference.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

const fs::path kShapes = testing::kWanFixtures / "wan2_2_shapes";
const fs::path kQuantFixture = testing::kWanFixtures / "tiny_autoround_w4g32";

using Shapes = std::map<std::string, std::vector<int64_t>>;

Shapes checkpoint_shapes(const models::Component& c) {
  Shapes out;
  for (const std::string& name : c.checkpoint().names()) {
    out[name] = c.checkpoint().get(name).value().shape;
  }
  return out;
}

Shapes spec_shapes(const std::vector<models::TensorSpec>& specs) {
  Shapes out;
  for (const auto& t : specs) out[t.name] = t.shape;
  return out;
}

// The bytes of a component's weight files past their safetensors headers.
size_t tensor_bytes(const fs::path& dir) {
  size_t total = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    std::ifstream in(e.path(), std::ios::binary);
    uint64_t header = 0;
    in.read(reinterpret_cast<char*>(&header), sizeof(header));
    total += e.file_size() - sizeof(header) - header;
  }
  return total;
}

nlohmann::json inspect_json(const std::string& dir, const std::string& size) {
  const auto r = run_cli("inspect " + dir + " --json " + size, false);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.exit_code == 0 ? nlohmann::json::parse(r.output) : nlohmann::json();
}

const nlohmann::json& component(const nlohmann::json& j, const std::string& name) {
  for (const auto& c : j["components"]) {
    if (c["name"] == name) return c;
  }
  static const nlohmann::json kNone;
  ADD_FAILURE() << "no component " << name;
  return kNone;
}

TEST(WanSpecs, AreTheCheckpointsTensors) {
  for (const char* p : {"t2v_a14b", "ti2v_5b", "i2v_a14b"}) {
    const std::string dir = testing::wan_pipeline(p);
    auto text = models::Component::open(dir + "/text_encoder");
    ASSERT_TRUE(text.ok()) << text.status().to_string();
    auto t5 = diffusion::read_t5_config(*text);
    ASSERT_TRUE(t5.ok()) << t5.status().to_string();
    EXPECT_EQ(spec_shapes(diffusion::t5_encoder_tensor_specs(*t5)), checkpoint_shapes(*text)) << p;

    auto vae = models::Component::open(dir + "/vae");
    ASSERT_TRUE(vae.ok()) << vae.status().to_string();
    auto vc = diffusion::read_wan_vae_config(*vae);
    ASSERT_TRUE(vc.ok()) << vc.status().to_string();
    EXPECT_EQ(spec_shapes(diffusion::wan_vae_tensor_specs(*vc, true)), checkpoint_shapes(*vae))
        << p;
    // Without the encoder: only the decoder side.
    for (const auto& t : diffusion::wan_vae_tensor_specs(*vc, false)) {
      EXPECT_TRUE(t.name.rfind("encoder.", 0) != 0 && t.name != "quant_conv.weight") << t.name;
    }

    auto xf = models::Component::open(dir + "/transformer");
    ASSERT_TRUE(xf.ok()) << xf.status().to_string();
    auto xc = diffusion::read_wan_transformer_config(*xf);
    ASSERT_TRUE(xc.ok()) << xc.status().to_string();
    EXPECT_EQ(spec_shapes(diffusion::wan_transformer_tensor_specs(*xc)), checkpoint_shapes(*xf))
        << p;
  }
}

// f32 pipelines: every tensor is either a view of the file or an f32 copy, so resident is the
// files' tensor bytes exactly, and WanPipeline's figure (the files' sizes) is that plus the
// headers.
TEST(WanInspect, TinyPipelinesResidentIsTheLoadedBytes) {
  for (const auto& [p, size] :
       std::map<std::string, std::string>{{"t2v_a14b", "--width 32 --height 32"},
                                          {"i2v_a14b", "--width 32 --height 32"},
                                          {"ti2v_5b", "--width 64 --height 64"}}) {
    const std::string dir = testing::wan_pipeline(p);
    const nlohmann::json j = inspect_json(dir, size + " --num-frames 9 --max-sequence-length 16");
    ASSERT_FALSE(j.is_null()) << p;
    for (const char* k :
         {"pipeline", "components", "width", "height", "frames", "latent_shape", "video_tokens",
          "text_tokens", "resident_weight_bytes", "activation_bytes", "activation_bytes_cfg",
          "step_peak_bytes", "step_peak_bytes_cfg", "vae_decode_bytes", "vae_decode_peak_bytes",
          "peak_bytes"}) {
      EXPECT_TRUE(j.contains(k)) << p << " " << k;
    }
    std::vector<std::string> names = {"text_encoder", "transformer"};
    if (p != "ti2v_5b") names.push_back("transformer_2");
    names.push_back("vae");
    ASSERT_EQ(j["components"].size(), names.size()) << p;
    size_t files = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      const auto& c = j["components"][i];
      EXPECT_EQ(c["name"], names[i]);
      EXPECT_EQ(c["sized_from"], "config.json + weight headers");
      EXPECT_EQ(c["weights"], "F32") << p << " " << names[i];
      EXPECT_EQ(c["resident_bytes"].get<size_t>(), tensor_bytes(fs::path(dir) / names[i]))
          << p << " " << names[i];
      files += tensor_bytes(fs::path(dir) / names[i]);
    }
    auto pipe = diffusion::WanPipeline::load(dir);
    ASSERT_TRUE(pipe.ok()) << pipe.status().to_string();
    EXPECT_EQ(j["resident_weight_bytes"].get<size_t>(), files);
    EXPECT_LT(j["resident_weight_bytes"].get<size_t>(), (*pipe)->resident_bytes());
    EXPECT_GT(j["resident_weight_bytes"].get<size_t>(), (*pipe)->resident_bytes() * 3 / 4)
        << "the headers of the tiny files are the difference";

    // The server's check of a request (WanPipeline::request_peak_bytes, CFG at guidance 5)
    // holds inspect's step and decode figures and, beyond them, the latents, embeddings and
    // frames they leave out.
    diffusion::WanRequest req;
    req.width = j["width"], req.height = j["height"], req.num_frames = 9;
    req.max_sequence_length = 16;
    const size_t request = (*pipe)->request_peak_bytes(req, 2);
    const size_t inspected =
        std::max(j["activation_bytes_cfg"].get<size_t>(), j["vae_decode_bytes"].get<size_t>());
    const size_t frames = static_cast<size_t>(9 * req.width * req.height * 3);
    size_t latents = 1;
    for (const auto& d : j["latent_shape"]) latents *= d.get<size_t>();
    EXPECT_GE(request, inspected) << p;
    EXPECT_LE(request, inspected + frames * 6 + latents * 4 * 16 + 64 * 1024) << p;
    EXPECT_EQ(j["peak_bytes"].get<size_t>(),
              files + std::max(j["activation_bytes_cfg"].get<size_t>(),
                               j["vae_decode_bytes"].get<size_t>()));
  }
}

// The auto-round W4A16 expert pair in t2v_a14b's pipeline: every quantized linear's predicted
// bytes are the loaded matrix's.
TEST(WanInspect, QuantizedExpertsAreTheRepackedBytes) {
  const fs::path dir = fs::temp_directory_path() / ("qs_wan_inspect_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(testing::wan_pipeline("t2v_a14b"), dir, fs::copy_options::recursive);
  for (const char* e : {"transformer", "transformer_2"}) {
    fs::remove_all(dir / e);
    fs::copy(kQuantFixture / e, dir / e, fs::copy_options::recursive);
  }
  const nlohmann::json j =
      inspect_json(dir.string(), "--width 32 --height 32 --num-frames 9 --max-sequence-length 16");
  ASSERT_FALSE(j.is_null());
  auto pipe = diffusion::WanPipeline::load(dir.string());
  ASSERT_TRUE(pipe.ok()) << pipe.status().to_string();
  // WanPipeline's figure is the files' sizes: the quantized files hold f16 scales and int32
  // zero points where the loaded matrices hold f32 scales, and small headers besides.
  const double ratio = static_cast<double>(j["resident_weight_bytes"].get<size_t>()) /
                       static_cast<double>((*pipe)->resident_bytes());
  EXPECT_GT(ratio, 0.85);
  EXPECT_LT(ratio, 1.0);
  for (const char* e : {"transformer", "transformer_2"}) {
    const auto& c = component(j, e);
    EXPECT_EQ(c["quantized_linears"], 20) << e;
    EXPECT_NE(c["weights"].get<std::string>().find("int4 g32"), std::string::npos) << c["weights"];
    EXPECT_LT(c["resident_bytes"].get<size_t>(), c["bf16_bytes"].get<size_t>());
    auto comp = models::Component::open((dir / e).string());
    ASSERT_TRUE(comp.ok()) << comp.status().to_string();
    auto config = diffusion::read_wan_transformer_config(*comp);
    ASSERT_TRUE(config.ok());
    size_t predicted = 0, loaded = 0;
    for (const auto& t : diffusion::wan_transformer_tensor_specs(*config)) {
      if (!t.linear) continue;
      const std::string module = t.name.substr(0, t.name.size() - 7);
      const formats::QuantScheme scheme = comp->quantization().scheme_for(module);
      if (!scheme.quantized()) continue;
      auto w = comp->linear(module, t.shape[0], t.shape[1], nullptr);
      ASSERT_TRUE(w.ok()) << w.status().to_string();
      predicted += ops::QuantMatrix::resident_bytes_for(scheme, t.shape[0], t.shape[1]);
      loaded += w->resident_bytes();
    }
    EXPECT_GT(loaded, 0u);
    EXPECT_EQ(predicted, loaded) << e;
  }
  fs::remove_all(dir);
}

// The public configs, as diffusers 0.42.1 and transformers 5.23 count them:
// sum(p.numel() for p in Model(**config).parameters()) on the meta device (UMT5's tied
// embedding once).
TEST(WanInspect, PublicConfigsMatchDiffusersParameterCounts) {
  struct Want {
    const char* name;
    int64_t transformer, vae;
    int64_t linears;
    bool two_experts;
  };
  const int64_t kUmt5Xxl = 5680910336;
  for (const Want& w : {Want{"t2v_a14b", 14288491584, 126892531, 406, true},
                        Want{"i2v_a14b", 14288901184, 126892531, 406, true},
                        Want{"ti2v_5b", 4999787712, 704688668, 306, false}}) {
    const nlohmann::json j = inspect_json((kShapes / w.name).string(), "");
    ASSERT_FALSE(j.is_null()) << w.name;
    ASSERT_EQ(j["components"].size(), w.two_experts ? 4u : 3u) << w.name;
    EXPECT_EQ(component(j, "text_encoder")["parameters"], kUmt5Xxl);
    EXPECT_EQ(component(j, "text_encoder")["linears"], 24 * 7);
    EXPECT_EQ(component(j, "transformer")["parameters"], w.transformer) << w.name;
    EXPECT_EQ(component(j, "transformer")["linears"], w.linears) << w.name;
    if (w.two_experts) {
      EXPECT_EQ(component(j, "transformer_2")["parameters"], w.transformer) << w.name;
    }
    EXPECT_EQ(component(j, "vae")["parameters"], w.vae) << w.name;
    for (const auto& c : j["components"]) {
      EXPECT_EQ(c["sized_from"], "config.json");
      EXPECT_EQ(c["quantized_linears"], 0);
      // 16-bit weights as views; norms, biases and the VAE's kernels as f32.
      EXPECT_GE(c["resident_bytes"].get<size_t>(), c["bf16_bytes"].get<size_t>());
    }
    // The experts are almost all matmul weights: within 0.2 % of 2 bytes a parameter.
    const auto& t = component(j, "transformer");
    EXPECT_LT(t["resident_bytes"].get<double>(), 1.002 * t["bf16_bytes"].get<double>());
    EXPECT_EQ(component(j, "vae")["resident_bytes"].get<size_t>(), static_cast<size_t>(w.vae) * 4);
    // UMT5-XXL: the 256384 x 4096 embedding and 24 blocks' q, k, v, o (4096 x 4096) and wi_0,
    // wi_1, wo (10240 x 4096) stay 2-byte views; each block's relative-position bias (32 x 64)
    // and two norms, and the final norm, are f32.
    const size_t views = size_t{256384} * 4096 + size_t{24} * (4 * 4096 * 4096 + 3 * 10240 * 4096);
    const size_t f32 = size_t{24} * 32 * 64 + size_t{49} * 4096;
    EXPECT_EQ(component(j, "text_encoder")["resident_bytes"].get<size_t>(), views * 2 + f32 * 4);
    EXPECT_EQ(views + f32, static_cast<size_t>(kUmt5Xxl));
    // Defaults: 832x480, 81 frames.
    EXPECT_EQ(j["width"], 832);
    EXPECT_EQ(j["height"], 480);
    EXPECT_EQ(j["frames"], 81);
  }
  // A14B: Wan2.1's VAE (16 channels, 8x) and 2x2 patches over 21 latent frames.
  const nlohmann::json t2v = inspect_json((kShapes / "t2v_a14b").string(), "");
  EXPECT_EQ(t2v["latent_shape"], nlohmann::json({16, 21, 60, 104}));
  EXPECT_EQ(t2v["video_tokens"], 21 * 30 * 52);
  // TI2V-5B: Wan2.2's VAE (48 channels, 16x).
  const nlohmann::json ti2v = inspect_json((kShapes / "ti2v_5b").string(), "");
  EXPECT_EQ(ti2v["latent_shape"], nlohmann::json({48, 21, 30, 52}));
  EXPECT_EQ(ti2v["video_tokens"], 21 * 15 * 26);
}

TEST(WanInspect, PublicConfigsGrowWithSizeAndFrames) {
  for (const char* p : {"t2v_a14b", "i2v_a14b", "ti2v_5b"}) {
    const std::string dir = (kShapes / p).string();
    // TI2V-5B's 720p is 1280x704: its sides are multiples of 32 (16x VAE, 2x2 patches).
    const std::string h720 = std::string(p) == "ti2v_5b" ? "704" : "720";
    const nlohmann::json small = inspect_json(dir, "--width 832 --height 480 --num-frames 81");
    const nlohmann::json longer = inspect_json(dir, "--width 832 --height 480 --num-frames 121");
    const nlohmann::json big =
        inspect_json(dir, "--width 1280 --height " + h720 + " --num-frames 121");
    ASSERT_FALSE(small.is_null() || longer.is_null() || big.is_null()) << p;
    EXPECT_EQ(small["resident_weight_bytes"], big["resident_weight_bytes"]);
    for (const char* k : {"video_tokens", "activation_bytes", "activation_bytes_cfg",
                          "vae_decode_bytes", "peak_bytes"}) {
      EXPECT_LT(small[k].get<size_t>(), longer[k].get<size_t>()) << p << " " << k;
      EXPECT_LT(longer[k].get<size_t>(), big[k].get<size_t>()) << p << " " << k;
    }
    for (const nlohmann::json* j : {&small, &longer, &big}) {
      EXPECT_LT((*j)["activation_bytes"].get<size_t>(), (*j)["activation_bytes_cfg"].get<size_t>());
      EXPECT_EQ(
          (*j)["step_peak_bytes_cfg"].get<size_t>(),
          (*j)["resident_weight_bytes"].get<size_t>() + (*j)["activation_bytes_cfg"].get<size_t>());
      EXPECT_EQ(
          (*j)["vae_decode_peak_bytes"].get<size_t>(),
          (*j)["resident_weight_bytes"].get<size_t>() + (*j)["vae_decode_bytes"].get<size_t>());
    }
    // The decoded video alone, as f32, is a floor under the decode's working set.
    EXPECT_GT(big["vae_decode_bytes"].get<size_t>(), size_t{121} * 1280 * 704 * 3 * 4);
  }
  // Not multiples of the pipeline's 32, a frame count past 4k + 1, a flag FLUX does not take.
  auto r = run_cli("inspect " + (kShapes / "ti2v_5b").string() + " --width 1280 --height 720");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("multiples of 32"), std::string::npos) << r.output;
  r = run_cli("inspect " + (kShapes / "t2v_a14b").string() + " --num-frames 80");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("4k + 1"), std::string::npos) << r.output;
  r = run_cli("inspect " + testing::kFluxPipeline + " --num-frames 81");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--num-frames"), std::string::npos) << r.output;
  // The text report names the size and both peaks.
  r = run_cli("inspect " + (kShapes / "t2v_a14b").string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("WanPipeline"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("denoising step at 832x480, 81 frames"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("VAE decode of the 81 frames"), std::string::npos) << r.output;
}

// W4A16 g128 (auto-round's default export, the block linears int4): the public configs with a
// quantization_config in each expert's config.json, as `quantize` writes it.
TEST(WanInspect, W4A16ConfigsShrinkTheExperts) {
  const fs::path root = fs::temp_directory_path() / ("qs_wan_w4a16_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  const nlohmann::json quant = {{"bits", 4},
                                {"group_size", 128},
                                {"sym", true},
                                {"data_type", "int"},
                                {"quant_method", "auto-round"},
                                {"packing_format", "auto_round:auto_gptq"},
                                {"block_name_to_quantize", "blocks"}};
  for (const char* p : {"t2v_a14b", "i2v_a14b", "ti2v_5b"}) {
    const fs::path dir = root / p;
    fs::copy(kShapes / p, dir, fs::copy_options::recursive);
    for (const char* e : {"transformer", "transformer_2"}) {
      if (!fs::exists(dir / e)) continue;
      auto config = read_json((dir / e / "config.json").string());
      ASSERT_TRUE(config.ok());
      (*config)["quantization_config"] = quant;
      ASSERT_TRUE(write_json((dir / e / "config.json").string(), *config).ok());
    }
    const nlohmann::json bf16 = inspect_json((kShapes / p).string(), "");
    const nlohmann::json w4 = inspect_json(dir.string(), "");
    ASSERT_FALSE(bf16.is_null() || w4.is_null()) << p;
    for (const char* e : {"transformer", "transformer_2"}) {
      if (!fs::exists(dir / e)) continue;
      const auto& a = component(bf16, e);
      const auto& b = component(w4, e);
      EXPECT_EQ(b["parameters"], a["parameters"]);
      // Every block linear (10 a block) is int4; the embedders and proj_out stay 16-bit.
      EXPECT_EQ(b["quantized_linears"].get<int64_t>(), a["linears"].get<int64_t>() - 6) << p;
      // int4 codes plus an f32 scale per 128 inputs: a little over a quarter of bf16.
      EXPECT_GT(b["resident_bytes"].get<size_t>(), a["resident_bytes"].get<size_t>() / 4) << p;
      EXPECT_LT(b["resident_bytes"].get<size_t>(), a["resident_bytes"].get<size_t>() * 3 / 10) << p;
    }
    for (const char* c : {"text_encoder", "vae"}) {
      EXPECT_EQ(component(w4, c)["resident_bytes"], component(bf16, c)["resident_bytes"]) << c;
    }
    EXPECT_LT(w4["peak_bytes"].get<size_t>(), bf16["peak_bytes"].get<size_t>());
    EXPECT_EQ(w4["activation_bytes_cfg"], bf16["activation_bytes_cfg"]);
  }
  fs::remove_all(root);
}

}  // namespace
}  // namespace qs
