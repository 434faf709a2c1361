// tests: the videos API's pieces without HTTP: vLLM-Omni's form (multipart, urlencoded and
// JSON bodies; 422 for schema mistakes, 400 for values), the resolution of size, fps and frames
// (size over width/height, num_frames over seconds x fps, 4k + 1 frames, the image's aspect),
// the job store (VideoResponse shape, eviction by count and bytes, delete cancelling a running
// job), the defaults and image rules a video pipeline gives through DiffusionPipeline (the tiny
// Wan2.2 T2V, I2V and TI2V fixtures), and the engine thread over the tiny T2V fixture (FIFO, a
// queued job cancelled before it runs, the memory budget's refusal).
#include <httplib.h>

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "diffusion/pipeline.h"
#include "server/video_backend.h"
#include "server/videos_handler.h"
#include "server/videos_request.h"

namespace qs::server {
namespace {

constexpr const char* kT2v = QS_SOURCE_DIR "/tests/golden/fixtures/wan/t2v_a14b/pipeline";
constexpr const char* kI2v = QS_SOURCE_DIR "/tests/golden/fixtures/wan/i2v_a14b/pipeline";
constexpr const char* kTi2v = QS_SOURCE_DIR "/tests/golden/fixtures/wan/ti2v_5b/pipeline";

std::unique_ptr<diffusion::DiffusionPipeline> load(const char* dir) {
  Result<std::unique_ptr<diffusion::DiffusionPipeline>> p = diffusion::load_pipeline(dir);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return p.ok() ? std::move(*p) : nullptr;
}

httplib::Request multipart(const std::vector<std::pair<std::string, std::string>>& fields) {
  httplib::Request req;
  req.set_header("Content-Type", "multipart/form-data; boundary=xyz");
  for (const auto& [name, value] : fields) {
    req.files.emplace(name, httplib::MultipartFormData{name, value, "", ""});
  }
  return req;
}

ApiError expect_error(const httplib::Request& req) {
  VideosRequest r;
  std::optional<ApiError> e = parse_videos_request(req, &r);
  EXPECT_TRUE(e);
  return e.value_or(ApiError{});
}

TEST(VideosRequestTest, EveryFieldFromAMultipartForm) {
  httplib::Request req = multipart({{"prompt", "a fox"},
                                    {"model", "m"},
                                    {"negative_prompt", "blur"},
                                    {"width", "64"},
                                    {"height", "48"},
                                    {"num_frames", "17"},
                                    {"seconds", "3"},
                                    {"fps", "24"},
                                    {"num_inference_steps", "30"},
                                    {"guidance_scale", "4.5"},
                                    {"guidance_scale_2", "3"},
                                    {"boundary_ratio", "0.9"},
                                    {"flow_shift", "12"},
                                    {"seed", "42"},
                                    {"max_sequence_length", "16"},
                                    {"user", "u"},
                                    {"extra_params", "{}"}});
  req.files.emplace("input_reference",
                    httplib::MultipartFormData{"input_reference", "PNGBYTES", "in.png", ""});
  VideosRequest r;
  ASSERT_FALSE(parse_videos_request(req, &r));
  EXPECT_EQ(r.prompt, "a fox");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.negative_prompt, "blur");
  EXPECT_EQ(r.width, 64);
  EXPECT_EQ(r.height, 48);
  EXPECT_EQ(r.num_frames, 17);
  EXPECT_EQ(r.seconds, 3);
  EXPECT_EQ(r.fps, 24);
  EXPECT_EQ(r.num_inference_steps, 30);
  EXPECT_EQ(r.guidance_scale, 4.5);
  EXPECT_EQ(r.guidance_scale_2, 3.0);
  EXPECT_EQ(r.boundary_ratio, 0.9);
  EXPECT_EQ(r.flow_shift, 12.0);
  EXPECT_EQ(r.seed, 42u);
  EXPECT_EQ(r.max_sequence_length, 16);
  EXPECT_EQ(r.image, "PNGBYTES");
  EXPECT_EQ(r.image_name, "in.png");
  EXPECT_EQ(r.ignored_fields, std::vector<std::string>{"extra_params"});
}

TEST(VideosRequestTest, SizeOverridesWidthAndHeight) {
  VideosRequest r;
  ASSERT_FALSE(parse_videos_request(
      multipart({{"prompt", "p"}, {"width", "64"}, {"height", "48"}, {"size", "832x480"}}), &r));
  EXPECT_EQ(r.width, 832);
  EXPECT_EQ(r.height, 480);
}

TEST(VideosRequestTest, UrlencodedAndJsonBodies) {
  httplib::Request form;
  form.set_header("Content-Type", "application/x-www-form-urlencoded");
  form.params = {{"prompt", "p"}, {"num_frames", "9"}, {"guidance_scale", "2"}};
  VideosRequest r;
  ASSERT_FALSE(parse_videos_request(form, &r));
  EXPECT_EQ(r.num_frames, 9);
  EXPECT_EQ(r.guidance_scale, 2.0);

  httplib::Request json;
  json.set_header("Content-Type", "application/json");
  json.body = R"({"prompt": "p", "num_frames": 9.0, "seconds": 4, "guidance_scale": 2,
                  "image_reference": {"image_url": "data:image/png;base64,iVBORw=="}})";
  ASSERT_FALSE(parse_videos_request(json, &r));
  EXPECT_EQ(r.num_frames, 9);
  EXPECT_EQ(r.seconds, 4);
  EXPECT_EQ(r.guidance_scale, 2.0);
  ASSERT_TRUE(r.image);
  EXPECT_EQ(r.image->size(), 4u);  // the base64 payload, decoded
  EXPECT_EQ(r.image_name, "image_reference");

  json.body = R"({"prompt": 1})";
  ApiError e = expect_error(json);
  EXPECT_EQ(e.http_status, 422);
  EXPECT_EQ(e.param, "prompt");
}

TEST(VideosRequestTest, SchemaMistakesAre422) {
  for (const auto& [fields, param] :
       std::vector<std::pair<std::vector<std::pair<std::string, std::string>>, std::string>>{
           {{{"size", "32x32"}}, "prompt"},
           {{{"prompt", "p"}, {"size", "32"}}, "size"},
           {{{"prompt", "p"}, {"size", "32x32x1"}}, "size"},
           {{{"prompt", "p"}, {"seconds", "04"}}, "seconds"},
           {{{"prompt", "p"}, {"seconds", "1.5"}}, "seconds"},
           {{{"prompt", "p"}, {"num_frames", "9.5"}}, "num_frames"},
           {{{"prompt", "p"}, {"fps", "1234567890"}}, "fps"},
           {{{"prompt", "p"}, {"guidance_scale", "inf"}}, "guidance_scale"},
           {{{"prompt", "p"}, {"seed", "-1"}}, "seed"},
           {{{"prompt", "p"}, {"generate_sound", "maybe"}}, "generate_sound"},
           // A text part where FastAPI expects an UploadFile.
           {{{"prompt", "p"}, {"input_reference", "text, not a file"}}, "input_reference"}}) {
    const ApiError e = expect_error(multipart(fields));
    EXPECT_EQ(e.http_status, 422) << e.message;
    EXPECT_EQ(e.param, param) << e.message;
  }
  httplib::Request text;
  text.set_header("Content-Type", "text/plain");
  text.body = "prompt=p";
  EXPECT_EQ(expect_error(text).http_status, 422);
}

TEST(VideosRequestTest, ValuesOutOfBoundsAndUnsupportedOptionsAre400) {
  for (const auto& [fields, param] :
       std::vector<std::pair<std::vector<std::pair<std::string, std::string>>, std::string>>{
           {{{"prompt", "p"}, {"num_frames", "0"}}, "num_frames"},
           {{{"prompt", "p"}, {"width", "0"}}, "width"},
           {{{"prompt", "p"}, {"size", "0x32"}}, "size"},
           {{{"prompt", "p"}, {"fps", "241"}}, "fps"},
           {{{"prompt", "p"}, {"num_inference_steps", "201"}}, "num_inference_steps"},
           {{{"prompt", "p"}, {"guidance_scale", "-0.5"}}, "guidance_scale"},
           {{{"prompt", "p"}, {"guidance_scale_2", "20.5"}}, "guidance_scale_2"},
           {{{"prompt", "p"}, {"boundary_ratio", "2"}}, "boundary_ratio"},
           {{{"prompt", "p"}, {"lora", "{\"name\": \"x\"}"}}, "lora"},
           {{{"prompt", "p"}, {"enable_frame_interpolation", "true"}},
            "enable_frame_interpolation"},
           {{{"prompt", "p"}, {"image_reference", "{\"file_id\": \"f\"}"}}, "image_reference"},
           {{{"prompt", "p"}, {"image_reference", "{\"image_url\": \"http://x/a.png\"}"}},
            "image_reference"}}) {
    const ApiError e = expect_error(multipart(fields));
    EXPECT_EQ(e.http_status, 400) << e.message;
    EXPECT_EQ(e.param, param) << e.message;
  }
  // input_reference in a body that has no files.
  httplib::Request json;
  json.set_header("Content-Type", "application/json");
  json.body = R"({"prompt": "p", "input_reference": "x.png"})";
  const ApiError e = expect_error(json);
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "input_reference");
  // False flags change nothing.
  VideosRequest r;
  const std::optional<ApiError> none = parse_videos_request(
      multipart({{"prompt", "p"}, {"generate_sound", "false"}, {"lora", ""}}), &r);
  EXPECT_FALSE(none) << none->message;
}

TEST(VideosRequestTest, OneImageSourceAtATime) {
  httplib::Request req =
      multipart({{"prompt", "p"},
                 {"image_reference", "{\"image_url\": \"data:image/png;base64,iVBORw==\"}"}});
  req.files.emplace("input_reference",
                    httplib::MultipartFormData{"input_reference", "PNG", "in.png", ""});
  const ApiError e = expect_error(req);
  EXPECT_EQ(e.http_status, 400);
  EXPECT_NE(e.message.find("not both"), std::string::npos);
}

TEST(ResolveVideoTest, DefaultsSecondsAndFrameRounding) {
  VideoDefaults d;
  d.fps = 16;
  VideosRequest r;
  r.prompt = "p";
  ResolvedVideo v = resolve_video(r, d, nullptr, 99);
  EXPECT_EQ(v.request.width, 832);
  EXPECT_EQ(v.request.height, 480);
  EXPECT_EQ(v.request.num_frames, 81);
  EXPECT_EQ(v.fps, 16);
  EXPECT_EQ(v.request.seed, 99u);
  EXPECT_EQ(v.size, "832x480");
  EXPECT_EQ(v.seconds, "6");  // 81 frames at 16 fps, rounded up

  // seconds x fps, then 4k + 1 as diffusers' `num_frames // 4 * 4 + 1`.
  r.seconds = 4;
  v = resolve_video(r, d, nullptr, 0);
  EXPECT_EQ(v.asked_frames, 64);
  EXPECT_EQ(v.request.num_frames, 65);
  EXPECT_EQ(v.seconds, "4");
  r.fps = 24;
  EXPECT_EQ(resolve_video(r, d, nullptr, 0).request.num_frames, 97);
  // An explicit num_frames wins over seconds x fps.
  r.num_frames = 10;
  v = resolve_video(r, d, nullptr, 0);
  EXPECT_EQ(v.asked_frames, 10);
  EXPECT_EQ(v.request.num_frames, 9);
  r.num_frames = 17;
  EXPECT_EQ(resolve_video(r, d, nullptr, 0).request.num_frames, 17);

  r.width = 64;
  r.seed = 5;
  r.num_inference_steps = 3;
  r.guidance_scale = 1.5;
  r.guidance_scale_2 = 2.5;
  r.boundary_ratio = 0.5;
  r.flow_shift = 7;
  r.max_sequence_length = 16;
  v = resolve_video(r, d, nullptr, 0);
  EXPECT_EQ(v.request.width, 64);
  EXPECT_EQ(v.request.height, 480);
  EXPECT_EQ(v.request.seed, 5u);
  EXPECT_EQ(v.request.num_inference_steps, 3);
  EXPECT_EQ(v.request.guidance_scale, 1.5);
  EXPECT_EQ(v.request.guidance_scale_2, 2.5);
  EXPECT_EQ(v.request.boundary_ratio, 0.5);
  EXPECT_EQ(v.request.flow_shift, 7.0);
  EXPECT_EQ(v.request.max_sequence_length, 16);
}

TEST(ResolveVideoTest, ImageAspectAtTheDefaultArea) {
  VideoDefaults d;  // 832x480: 399360 pixels
  vision::RgbImage image;
  image.width = 1000;
  image.height = 500;
  VideosRequest r;
  ResolvedVideo v = resolve_video(r, d, &image, 0);
  // sqrt(399360 / 2) = 446.9 -> 447 -> 432; sqrt(399360 * 2) = 893.7 -> 894 -> 880.
  EXPECT_EQ(v.request.height, 432);
  EXPECT_EQ(v.request.width, 880);
  // A side the request gave is kept; only the other is derived.
  r.height = 256;
  v = resolve_video(r, d, &image, 0);
  EXPECT_EQ(v.request.height, 256);
  EXPECT_EQ(v.request.width, 880);
}

// What the handler resolves with comes from the pipeline: its resolve() of an empty request
// (diffusers' WanPipeline: 832x480, 81 frames), its frame rate and its size and frame grid.
TEST(ResolveVideoTest, DefaultsFromThePipeline) {
  const auto t2v = load(kT2v);
  ASSERT_TRUE(t2v);
  EXPECT_EQ(t2v->output(), diffusion::PipelineOutput::kVideo);
  const VideoDefaults d = video_defaults(*t2v);
  EXPECT_EQ(d.width, 832);
  EXPECT_EQ(d.height, 480);
  EXPECT_EQ(d.num_frames, 81);
  EXPECT_EQ(d.fps, 16);
  EXPECT_EQ(d.temporal_scale, 4);
  // The VAE's 8x times the transformer's 2 x 2 patch.
  EXPECT_EQ(d.spatial_multiple, 16);
  // Left unset by resolve_video, the rest is the pipeline's resolve() (WanPipeline: 50 steps,
  // guidance 5, 512 tokens).
  VideosRequest r;
  r.prompt = "p";
  ResolvedVideo v = resolve_video(r, d, nullptr, 0);
  EXPECT_FALSE(v.request.num_inference_steps);
  EXPECT_FALSE(v.request.max_sequence_length);
  EXPECT_FALSE(v.request.guidance_scale);
  const diffusion::DiffusionRequest resolved = t2v->resolve(v.request);
  EXPECT_EQ(resolved.num_inference_steps, 50);
  EXPECT_EQ(resolved.guidance_scale, 5.0);
  EXPECT_EQ(resolved.max_sequence_length, 512);
  EXPECT_EQ(resolved.width, 832);
  EXPECT_EQ(resolved.num_frames, 81);

  const auto ti2v = load(kTi2v);
  ASSERT_TRUE(ti2v);
  EXPECT_EQ(video_defaults(*ti2v).fps, 24);  // TI2V-5B (expand_timesteps) makes 24 fps video
}

// The image rules the handler applies: I2V needs a first frame, TI2V takes one, T2V none.
TEST(ResolveVideoTest, ImageRulesByPipeline) {
  const auto t2v = load(kT2v), i2v = load(kI2v), ti2v = load(kTi2v);
  ASSERT_TRUE(t2v && i2v && ti2v);
  EXPECT_FALSE(t2v->requires_image());
  EXPECT_FALSE(t2v->takes_image());
  EXPECT_TRUE(i2v->requires_image());
  EXPECT_TRUE(i2v->takes_image());
  EXPECT_FALSE(ti2v->requires_image());
  EXPECT_TRUE(ti2v->takes_image());
  EXPECT_EQ(t2v->class_name(), "WanPipeline");
  EXPECT_EQ(i2v->class_name(), "WanImageToVideoPipeline");
}

VideoRecord record(const std::string& id) {
  VideoRecord r;
  r.id = id;
  r.model = "m";
  r.prompt = "p";
  r.size = "32x32";
  r.seconds = "1";
  r.created_at = 1;
  r.state = std::make_shared<VideoJobState>();
  return r;
}

VideoOutput mp4_of(size_t bytes) {
  VideoOutput out;
  out.mp4.assign(bytes, 'x');
  out.inference_seconds = 0.5;
  out.stage_seconds = {{"denoise", 0.3}, {"decode", 0.1}, {"encode", 0.1}};
  return out;
}

TEST(VideoStoreTest, ResponseShapeThroughTheLifecycle) {
  VideoStore store({});
  store.add(record("a"));
  Json j = video_response_json(*store.get("a"));
  EXPECT_EQ(j["status"], "queued");
  EXPECT_EQ(j["progress"], 0);
  EXPECT_EQ(j["object"], "video");
  EXPECT_EQ(j["media_type"], "video/mp4");
  EXPECT_TRUE(j["completed_at"].is_null());
  EXPECT_TRUE(j["file_name"].is_null());
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{
                      "model", "prompt", "id", "object", "status", "size", "progress", "seconds",
                      "quality", "completed_at", "created_at", "remixed_from_video_id", "error",
                      "media_type", "expires_at", "file_name", "inference_time_s",
                      "stage_durations", "peak_memory_mb"}));

  store.get("a")->state->set_progress(VideoStage::kDenoising, 2, 4);
  j = video_response_json(*store.get("a"));
  EXPECT_EQ(j["status"], "in_progress");
  EXPECT_EQ(j["progress"], 45);

  store.finish("a", mp4_of(10));
  j = video_response_json(*store.get("a"));
  EXPECT_EQ(j["status"], "completed");
  EXPECT_EQ(j["progress"], 100);
  EXPECT_EQ(j["file_name"], "a.mp4");
  EXPECT_EQ(j["inference_time_s"], 0.5);
  EXPECT_EQ(j["stage_durations"]["denoise"], 0.3);
  EXPECT_FALSE(j["completed_at"].is_null());

  store.add(record("b"));
  store.finish("b", Status(StatusCode::kInternal, "boom"));
  j = video_response_json(*store.get("b"));
  EXPECT_EQ(j["status"], "failed");
  EXPECT_EQ(j["error"]["message"], "boom");
  EXPECT_EQ(j["error"]["code"], "InternalServerError");
  EXPECT_TRUE(j["file_name"].is_null());
}

TEST(VideoStoreTest, OldestFinishedGoFirstPastEitherLimit) {
  VideoStore by_count({/*max_videos=*/2, /*max_bytes=*/1 << 20});
  for (const char* id : {"a", "b", "c"}) by_count.add(record(id));
  by_count.finish("b", mp4_of(1));
  by_count.finish("a", mp4_of(1));
  by_count.finish("c", mp4_of(1));
  EXPECT_FALSE(by_count.get("b"));  // finished first
  EXPECT_TRUE(by_count.get("a"));
  EXPECT_TRUE(by_count.get("c"));

  VideoStore by_bytes({/*max_videos=*/100, /*max_bytes=*/25});
  by_bytes.add(record("q"));  // still queued: never dropped
  for (const char* id : {"a", "b", "c"}) {
    by_bytes.add(record(id));
    by_bytes.finish(id, mp4_of(10));
  }
  EXPECT_FALSE(by_bytes.get("a"));
  EXPECT_TRUE(by_bytes.get("b"));
  EXPECT_TRUE(by_bytes.get("c"));
  EXPECT_TRUE(by_bytes.get("q"));
  // The newest stays even when it alone is over the limit.
  by_bytes.add(record("big"));
  by_bytes.finish("big", mp4_of(100));
  EXPECT_TRUE(by_bytes.get("big"));
  EXPECT_FALSE(by_bytes.get("b"));
  EXPECT_FALSE(by_bytes.get("c"));
  // A delete frees its bytes: the next small one fits beside nothing else.
  EXPECT_TRUE(by_bytes.remove("big"));
  by_bytes.add(record("d"));
  by_bytes.finish("d", mp4_of(10));
  by_bytes.add(record("e"));
  by_bytes.finish("e", mp4_of(10));
  EXPECT_TRUE(by_bytes.get("d"));
  EXPECT_TRUE(by_bytes.get("e"));
}

TEST(VideoStoreTest, RemoveCancelsAnUnfinishedJobAndDropsItsResult) {
  VideoStore store({});
  VideoRecord r = record("a");
  const std::shared_ptr<VideoJobState> state = r.state;
  store.add(std::move(r));
  EXPECT_TRUE(store.remove("a"));
  EXPECT_TRUE(state->cancelled());
  store.finish("a", mp4_of(10));  // the job's end after its delete
  EXPECT_FALSE(store.get("a"));
  EXPECT_TRUE(store.list().empty());
  EXPECT_FALSE(store.remove("a"));
}

TEST(VideoStoreTest, ListIsInCreationOrder) {
  VideoStore store({});
  for (const char* id : {"z", "a", "m"}) store.add(record(id));
  std::vector<std::string> ids;
  for (const VideoRecord& r : store.list()) ids.push_back(r.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"z", "a", "m"}));
}

TEST(VideoProgressTest, PercentByStage) {
  EXPECT_EQ((VideoProgress{VideoStage::kQueued, 0, 0}).percent(), 0);
  EXPECT_EQ((VideoProgress{VideoStage::kDenoising, 1, 4}).percent(), 22);
  EXPECT_EQ((VideoProgress{VideoStage::kDecoding, 4, 4}).percent(), 90);
  EXPECT_EQ((VideoProgress{VideoStage::kEncoding, 4, 4}).percent(), 95);
  EXPECT_EQ((VideoProgress{VideoStage::kFinished, 0, 0}).percent(), 100);
}

// What the engine thread's callbacks saw, in order.
struct Log {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> done;  // "name:<MP4 bytes>" or "name:<error message>"

  VideoCallback callback(const std::string& name) {
    return [this, name](Result<VideoOutput> r) {
      std::lock_guard<std::mutex> lock(mu);
      done.push_back(name + ":" + (r.ok() ? (r->mp4.substr(4, 4)) : r.status().message()));
      cv.notify_all();
    };
  }
  std::vector<std::string> wait_for(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return done.size() >= n; }));
    return done;
  }
};

VideoJob job(int64_t steps) {
  VideoJob j;
  j.request.prompt = "a cube";
  j.request.width = j.request.height = 32;
  j.request.num_frames = 9;
  j.request.num_inference_steps = steps;
  j.request.max_sequence_length = 16;
  j.fps = 8;
  j.state = std::make_shared<VideoJobState>();
  return j;
}

TEST(VideoBackendTest, FifoCancelledWhileQueuedAndTheBudget) {
  std::unique_ptr<diffusion::DiffusionPipeline> pipeline = load(kT2v);
  ASSERT_TRUE(pipeline);
  const size_t peak = pipeline->request_peak_bytes(pipeline->resolve(job(2).request), 1);
  ThreadPool pool(1);
  VideoBackend backend(std::move(pipeline), pool, static_cast<int64_t>(peak));
  EXPECT_EQ(backend.default_fps(), 16);
  EXPECT_TRUE(backend.validate(job(2).request).ok());
  VideoJob bigger = job(2);
  bigger.request.num_frames = 13;
  const Status over = backend.validate(bigger.request);
  EXPECT_EQ(over.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(over.message().find("video memory budget of"), std::string::npos) << over.message();

  Log log;
  VideoJob a = job(2), b = job(2), c = job(2);
  b.state->cancel();
  const std::shared_ptr<VideoJobState> a_state = a.state;
  ASSERT_TRUE(backend.submit(std::move(a), log.callback("a")).ok());
  ASSERT_TRUE(backend.submit(std::move(b), log.callback("b")).ok());
  ASSERT_TRUE(backend.submit(std::move(c), log.callback("c")).ok());
  EXPECT_EQ(log.wait_for(3),
            (std::vector<std::string>{"a:ftyp", "b:cancelled before it started", "c:ftyp"}));
  EXPECT_EQ(a_state->progress().stage, VideoStage::kFinished);
  backend.shutdown();
  // Nothing of a finished job stays in the backend (its request, frames and buffers went with
  // it): the state it shared with the HTTP side is ours alone again.
  EXPECT_EQ(a_state.use_count(), 1);
  EXPECT_FALSE(backend.healthy());
  EXPECT_FALSE(backend.submit(job(2), log.callback("late")).ok());
}

}  // namespace
}  // namespace qs::server
