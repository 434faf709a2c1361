// tests: /v1/images/generations bodies (vLLM-Omni's ImageGenerationRequest): size parsing,
// ranges, statuses (422 schema, 400 size), the pipeline requests built from them through
// DiffusionPipeline::resolve (defaults, seeds per image), base64 against RFC 4648's vectors, and
// the response's shape.
#include <gtest/gtest.h>

#include "diffusion/flux_pipeline.h"
#include "diffusion/pipeline.h"
#include "diffusion/png_image.h"
#include "server/images_handler.h"
#include "server/images_request.h"
#include "server/openai_response.h"

namespace qs::server {
namespace {

TEST(ImageSizeTest, ParsesWidthByHeight) {
  int64_t w = 0, h = 0;
  ASSERT_FALSE(parse_image_size("1024x768", &w, &h));
  EXPECT_EQ(w, 1024);
  EXPECT_EQ(h, 768);
  ASSERT_FALSE(parse_image_size("16x32", &w, &h));
  EXPECT_EQ(w, 16);
  EXPECT_EQ(h, 32);
}

TEST(ImageSizeTest, MalformedIsA400NamingIt) {
  for (const char* bad : {"", "x", "1024", "1024x", "x1024", "1024x1024x1", "10 24x1024", "-16x16",
                          "+16x16", "16X16", "16.0x16", "auto", "1024x1024 ", "9999999999x16"}) {
    int64_t w = 0, h = 0;
    const auto e = parse_image_size(bad, &w, &h);
    ASSERT_TRUE(e) << bad;
    EXPECT_EQ(e->http_status, 400) << bad;
    EXPECT_EQ(e->param, "size");
    EXPECT_NE(e->message.find("'" + std::string(bad) + "'"), std::string::npos) << e->message;
  }
}

TEST(ImageSizeTest, ZeroSideIsA400) {
  int64_t w = 0, h = 0;
  const auto e = parse_image_size("0x512", &w, &h);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->http_status, 400);
  EXPECT_NE(e->message.find("0x512"), std::string::npos);
}

TEST(ImagesRequestTest, DefaultsLeaveThePipelineToDecide) {
  ImagesRequest r;
  ASSERT_FALSE(parse_images_request(R"({"prompt": "a cat"})", &r));
  EXPECT_EQ(r.prompt, "a cat");
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.model);
  EXPECT_FALSE(r.width);
  EXPECT_FALSE(r.height);
  EXPECT_EQ(r.response_format, ImageResponseFormat::kB64Json);
  EXPECT_FALSE(r.num_inference_steps);
  EXPECT_FALSE(r.guidance_scale);
  EXPECT_FALSE(r.true_cfg_scale);
  EXPECT_FALSE(r.seed);
  EXPECT_TRUE(r.ignored_fields.empty());
}

TEST(ImagesRequestTest, EveryField) {
  ImagesRequest r;
  ASSERT_FALSE(parse_images_request(
      R"({"prompt": "p", "model": "m", "n": 3, "size": "64x32", "response_format": "b64_json",
          "user": "u", "negative_prompt": "blur", "num_inference_steps": 4,
          "guidance_scale": 2.5, "true_cfg_scale": 4, "seed": 7, "max_sequence_length": 64,
          "quality": "hd", "style": "vivid", "unknown_thing": 1})",
      &r));
  EXPECT_EQ(*r.model, "m");
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(*r.width, 64);
  EXPECT_EQ(*r.height, 32);
  EXPECT_EQ(r.user, "u");
  EXPECT_EQ(r.negative_prompt, "blur");
  EXPECT_EQ(*r.num_inference_steps, 4);
  EXPECT_DOUBLE_EQ(*r.guidance_scale, 2.5);
  EXPECT_DOUBLE_EQ(*r.true_cfg_scale, 4.0);
  EXPECT_EQ(*r.seed, 7u);
  EXPECT_EQ(*r.max_sequence_length, 64);
  EXPECT_EQ(r.ignored_fields, std::vector<std::string>{"unknown_thing"});
}

TEST(ImagesRequestTest, FileFormat) {
  ImagesRequest r;
  ASSERT_FALSE(parse_images_request(R"({"prompt": "p", "response_format": "file"})", &r));
  EXPECT_EQ(r.response_format, ImageResponseFormat::kFile);
}

TEST(ImagesRequestTest, NFromOneToTen) {
  for (int n : {1, 2, 10}) {
    ImagesRequest r;
    EXPECT_FALSE(parse_images_request(R"({"prompt": "p", "n": )" + std::to_string(n) + "}", &r));
    EXPECT_EQ(r.n, n);
  }
  for (const char* n : {"0", "11", "-1", "1.5", "\"2\"", "1e30"}) {
    ImagesRequest r;
    const auto e = parse_images_request(R"({"prompt": "p", "n": )" + std::string(n) + "}", &r);
    ASSERT_TRUE(e) << n;
    EXPECT_EQ(e->http_status, 422) << n;
    EXPECT_EQ(e->type, "UnprocessableEntityError");
    EXPECT_EQ(e->param, "n");
  }
}

struct BadBody {
  const char* body;
  int status;
  const char* param;
};

TEST(ImagesRequestTest, SchemaErrorsAre422AndTheRest400) {
  const BadBody cases[] = {
      {"", 422, ""},
      {"{not json", 422, ""},
      {"[1, 2]", 422, ""},
      {"{}", 422, "prompt"},
      {R"({"prompt": null})", 422, "prompt"},
      {R"({"prompt": 5})", 422, "prompt"},
      {R"({"prompt": "p", "size": 512})", 422, "size"},
      {R"({"prompt": "p", "size": "512"})", 400, "size"},
      {R"({"prompt": "p", "response_format": "jpeg"})", 422, "response_format"},
      {R"({"prompt": "p", "response_format": "url"})", 400, "response_format"},
      {R"({"prompt": "p", "response_format": "file", "n": 2})", 400, "n"},
      {R"({"prompt": "p", "output_format": "webp"})", 400, "output_format"},
      {R"({"prompt": "p", "stream": true})", 400, "stream"},
      {R"({"prompt": "p", "num_inference_steps": "4"})", 422, "num_inference_steps"},
      {R"({"prompt": "p", "guidance_scale": "high"})", 422, "guidance_scale"},
      {R"({"prompt": "p", "seed": -1})", 422, "seed"},
      {R"({"prompt": "p", "seed": 1.5})", 422, "seed"},
      {R"({"prompt": "p", "model": 3})", 422, "model"},
      {R"({"prompt": "p", "negative_prompt": ["a"]})", 422, "negative_prompt"},
  };
  for (const BadBody& c : cases) {
    ImagesRequest r;
    const auto e = parse_images_request(c.body, &r);
    ASSERT_TRUE(e) << c.body;
    EXPECT_EQ(e->http_status, c.status) << c.body << ": " << e->message;
    EXPECT_EQ(e->param, c.param) << c.body;
    EXPECT_FALSE(e->message.empty());
  }
}

// The tiny FLUX.1 fixture behind the interface the server holds.
std::unique_ptr<diffusion::DiffusionPipeline> tiny_flux() {
  auto pipe = diffusion::load_pipeline(QS_SOURCE_DIR "/tests/golden/fixtures/flux/tiny_pipeline");
  EXPECT_TRUE(pipe.ok()) << pipe.status().message();
  return pipe.ok() ? std::move(*pipe) : nullptr;
}

TEST(ImagesRequestTest, PipelineRequestsCountSeedsUp) {
  const auto pipe = tiny_flux();
  ASSERT_TRUE(pipe);
  ImagesRequest r;
  ASSERT_FALSE(parse_images_request(
      R"({"prompt": "p", "n": 3, "seed": 41, "num_inference_steps": 2, "size": "32x16"})", &r));
  const auto reqs = image_requests(r, *pipe, 999);
  ASSERT_EQ(reqs.size(), 3u);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(reqs[i].seed, 41u + i);
    EXPECT_EQ(reqs[i].prompt, "p");
    EXPECT_EQ(reqs[i].width, 32);
    EXPECT_EQ(reqs[i].height, 16);
    EXPECT_EQ(reqs[i].num_inference_steps, 2);
  }
}

TEST(ImagesRequestTest, PipelineRequestsDefaults) {
  const auto pipe = tiny_flux();
  ASSERT_TRUE(pipe);
  ImagesRequest r;
  ASSERT_FALSE(parse_images_request(R"({"prompt": "p", "n": 2})", &r));
  const auto reqs = image_requests(r, *pipe, 999);
  ASSERT_EQ(reqs.size(), 2u);
  // The family's own request type holds diffusers' FluxPipeline.__call__ defaults: the server's
  // requests map to the same FluxRequest the CLI and the goldens run.
  const diffusion::FluxRequest defaults;
  EXPECT_EQ(reqs[0].width, 256);
  EXPECT_EQ(reqs[0].height, 256);
  EXPECT_EQ(reqs[0].num_frames, 1);
  EXPECT_EQ(reqs[0].num_inference_steps, defaults.steps);
  EXPECT_EQ(reqs[0].guidance_scale, defaults.guidance_scale);
  EXPECT_EQ(reqs[0].true_cfg_scale, defaults.true_cfg_scale);
  EXPECT_EQ(reqs[0].max_sequence_length, defaults.max_sequence_length);
  EXPECT_EQ(reqs[0].seed, 999u);
  EXPECT_EQ(reqs[1].seed, 1000u);
}

// A step count or sequence length of 0 that a client sent is not "unset": the pipeline's
// validate() refuses it (a 400) rather than resolve() replacing it with the default.
TEST(ImagesRequestTest, ZerosTheClientSentReachValidation) {
  const auto pipe = tiny_flux();
  ASSERT_TRUE(pipe);
  ImagesRequest r;
  ASSERT_FALSE(parse_images_request(R"({"prompt": "p", "num_inference_steps": 0})", &r));
  auto reqs = image_requests(r, *pipe, 1);
  EXPECT_EQ(reqs[0].num_inference_steps, 0);
  EXPECT_EQ(pipe->validate(reqs[0]).code(), StatusCode::kInvalidArgument);
  ASSERT_FALSE(parse_images_request(R"({"prompt": "p", "max_sequence_length": 0})", &r));
  reqs = image_requests(r, *pipe, 1);
  EXPECT_EQ(reqs[0].max_sequence_length, 0);
  EXPECT_EQ(pipe->validate(reqs[0]).code(), StatusCode::kInvalidArgument);
}

// diffusers: default_sample_size (128) x vae_scale_factor (2^(len(block_out_channels) - 1)).
TEST(ImagesPipelineTest, DefaultSizeAndValidation) {
  const auto pipe = tiny_flux();
  ASSERT_TRUE(pipe);
  EXPECT_EQ(pipe->output(), diffusion::PipelineOutput::kImage);
  // The tiny VAE has 2 blocks: scale factor 2.
  diffusion::DiffusionRequest req = pipe->resolve({});
  EXPECT_EQ(req.width, 256);
  EXPECT_EQ(req.height, 256);
  EXPECT_EQ(pipe->spatial_multiple(), 4);  // 2 x the VAE's scale factor (2 x 2 packing)
  req.width = req.height = 32;
  req.num_inference_steps = 2;
  EXPECT_TRUE(pipe->validate(req).ok());
  req.width = 30;  // not a multiple of 2 x the VAE's scale factor
  EXPECT_EQ(pipe->validate(req).code(), StatusCode::kInvalidArgument);
  req.width = 32;
  req.num_inference_steps = 0;
  EXPECT_EQ(pipe->validate(req).code(), StatusCode::kInvalidArgument);
  req.num_inference_steps = 2;
  req.true_cfg_scale = std::numeric_limits<double>::infinity();
  EXPECT_EQ(pipe->validate(req).code(), StatusCode::kInvalidArgument);
  // The video fields an image family does not take are refused by name.
  req.true_cfg_scale.reset();
  req.num_frames = 5;
  const Status frames = pipe->validate(req);
  EXPECT_EQ(frames.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(frames.message().find("num_frames does not apply to FLUX.1"), std::string::npos)
      << frames.message();
}

TEST(ImagesResponseTest, Base64Rfc4648Vectors) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foob"), "Zm9vYg==");
  EXPECT_EQ(base64_encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64_encode(std::string("\xff\xfe\x00", 3)), "//4A");
}

TEST(ImagesResponseTest, Shape) {
  const Json j = images_response(1700000000, {"foo", "fo"});
  EXPECT_EQ(j.dump(),
            R"({"created":1700000000,"data":[{"b64_json":"Zm9v","url":null,"revised_prompt":null},)"
            R"({"b64_json":"Zm8=","url":null,"revised_prompt":null}]})");
}

// encode_png gives the same file write_png writes, and it decodes to the pixels.
TEST(ImagesResponseTest, InMemoryPngRoundTrips) {
  std::vector<uint8_t> rgb(5 * 3 * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 7);
  auto png = diffusion::encode_png(5, 3, rgb);
  ASSERT_TRUE(png.ok());
  const std::string path = ::testing::TempDir() + "/encode_png_test.png";
  ASSERT_TRUE(diffusion::write_png(path, 5, 3, rgb).ok());
  std::FILE* f = std::fopen(path.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  std::string file;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) file.append(buf, n);
  std::fclose(f);
  EXPECT_EQ(*png, file);
  int64_t w = 0, h = 0;
  std::vector<uint8_t> back;
  ASSERT_TRUE(diffusion::read_png(path, &w, &h, &back).ok());
  EXPECT_EQ(w, 5);
  EXPECT_EQ(h, 3);
  EXPECT_EQ(back, rgb);
  EXPECT_FALSE(diffusion::encode_png(5, 4, rgb).ok());
}

}  // namespace
}  // namespace qs::server
