// server: the videos endpoints (see videos_handler.h). Statuses and messages follow
// vLLM-Omni's api_server.py (create_video, list_videos, retrieve_video, delete_video,
// download_video).
#include "server/videos_handler.h"

#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <random>

#include "core/log.h"
#include "server/client_connection.h"
#include "server/images_request.h"
#include "server/openai_response.h"
#include "vision/vae_image_input.h"

namespace qs::server {
namespace {

// What the engine thread hands back to a waiting /sync request.
struct SyncSession {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::optional<Result<VideoOutput>> result;
};

ApiError video_not_found() {
  return ApiError{404, "NotFoundError", "Video not found", ""};
}

int64_t now_seconds() {
  return static_cast<int64_t>(std::time(nullptr));
}

// Sends `mp4` without copying it into the response: the bytes stay alive while they stream,
// even if the job is deleted or evicted meanwhile.
void send_mp4(httplib::Response& res, std::shared_ptr<const std::string> mp4,
              const std::string& file_name) {
  res.set_header("Content-Disposition", "attachment; filename=\"" + file_name + "\"");
  const size_t size = mp4->size();
  res.set_content_provider(
      size, "video/mp4",
      [mp4 = std::move(mp4)](size_t offset, size_t length, httplib::DataSink& sink) {
        return sink.write(mp4->data() + offset, std::min(length, mp4->size() - offset));
      });
}

}  // namespace

ResolvedVideo resolve_video(const VideosRequest& r, const VideoDefaults& d,
                            const vision::RgbImage* image, uint64_t random_seed) {
  ResolvedVideo v;
  diffusion::DiffusionRequest& w = v.request;
  w.prompt = r.prompt;
  w.negative_prompt = r.negative_prompt;
  std::optional<int64_t> width = r.width, height = r.height;
  if ((!width || !height) && image != nullptr && image->width > 0 && image->height > 0) {
    // vLLM-Omni's Wan2.2 pre-processing: the image's aspect ratio at the default size's area,
    // each side rounded (Python's round: half to even) and then down to the multiple.
    const double area = static_cast<double>(d.width) * static_cast<double>(d.height);
    const double aspect = static_cast<double>(image->height) / static_cast<double>(image->width);
    const int64_t m = std::max<int64_t>(d.spatial_multiple, 1);
    if (!height) height = static_cast<int64_t>(std::nearbyint(std::sqrt(area * aspect))) / m * m;
    if (!width) width = static_cast<int64_t>(std::nearbyint(std::sqrt(area / aspect))) / m * m;
  }
  w.width = width.value_or(d.width);
  w.height = height.value_or(d.height);
  v.fps = static_cast<int>(r.fps.value_or(d.fps));
  int64_t frames = d.num_frames;
  if (r.num_frames) {
    frames = *r.num_frames;
  } else if (r.seconds) {
    frames = *r.seconds * v.fps;
  }
  v.asked_frames = frames;
  const int64_t t = d.temporal_scale;
  if (t > 1 && frames % t != 1) frames = frames / t * t + 1;
  w.num_frames = frames;
  w.num_inference_steps = r.num_inference_steps;  // a client's 0 stays 0: validate refuses it
  w.guidance_scale = r.guidance_scale;
  w.guidance_scale_2 = r.guidance_scale_2;
  w.boundary_ratio = r.boundary_ratio;
  w.flow_shift = r.flow_shift;
  w.max_sequence_length = r.max_sequence_length;
  w.seed = r.seed.value_or(random_seed);
  v.size = std::to_string(*w.width) + "x" + std::to_string(*w.height);
  v.seconds = r.seconds ? std::to_string(*r.seconds)
                        : std::to_string(std::max<int64_t>(1, (frames + v.fps - 1) / v.fps));
  return v;
}

VideoDefaults video_defaults(const diffusion::DiffusionPipeline& pipeline) {
  const diffusion::DiffusionRequest resolved = pipeline.resolve({});
  VideoDefaults d;
  d.width = resolved.width.value_or(0);
  d.height = resolved.height.value_or(0);
  d.num_frames = resolved.num_frames.value_or(0);
  d.fps = pipeline.default_fps();
  d.spatial_multiple = pipeline.spatial_multiple();
  d.temporal_scale = pipeline.frame_multiple();
  return d;
}

Json video_response_json(const VideoRecord& r) {
  const VideoProgress progress = r.state->progress();
  std::string status = "in_progress";
  if (r.finished) {
    status = r.error ? "failed" : "completed";
  } else if (progress.stage == VideoStage::kQueued) {
    status = "queued";
  }
  Json stages = Json::object();
  for (const auto& [name, seconds] : r.stage_seconds) stages[name] = seconds;
  Json error = nullptr;
  if (r.error) {
    error = {{"code", error_from_status(*r.error).type}, {"message", r.error->message()}};
  }
  return {{"model", r.model},
          {"prompt", r.prompt},
          {"id", r.id},
          {"object", "video"},
          {"status", status},
          {"size", r.size},
          {"progress", r.finished && !r.error ? 100 : progress.percent()},
          {"seconds", r.seconds},
          {"quality", "default"},
          {"completed_at", r.completed_at ? Json(*r.completed_at) : Json(nullptr)},
          {"created_at", r.created_at},
          {"remixed_from_video_id", nullptr},
          {"error", error},
          {"media_type", "video/mp4"},
          {"expires_at", nullptr},
          {"file_name", r.mp4 ? Json(r.id + ".mp4") : Json(nullptr)},
          {"inference_time_s", r.inference_time_s ? Json(*r.inference_time_s) : Json(nullptr)},
          {"stage_durations", stages},
          {"peak_memory_mb", r.peak_memory_mb.value_or(0.0)}};
}

void VideoStore::add(VideoRecord record) {
  std::lock_guard<std::mutex> lock(mu_);
  record.sequence = next_sequence_++;
  const std::string id = record.id;
  records_.emplace(id, std::move(record));
}

void VideoStore::finish(const std::string& id, Result<VideoOutput> out) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = records_.find(id);
  if (it == records_.end()) return;  // deleted while it ran: its MP4 goes with `out`
  VideoRecord& r = it->second;
  r.finished = true;
  r.completed_at = now_seconds();
  if (!out.ok()) {
    r.error = out.status();
  } else {
    mp4_bytes_ += static_cast<int64_t>(out->mp4.size());
    r.mp4 = std::make_shared<const std::string>(std::move(out->mp4));
    r.inference_time_s = out->inference_seconds;
    r.stage_seconds = std::move(out->stage_seconds);
    r.peak_memory_mb = out->peak_memory_mb;
  }
  finished_.push_back(id);
  evict();
}

void VideoStore::evict() {
  while (finished_.size() > 1 &&
         (finished_.size() > limits_.max_videos || mp4_bytes_ > limits_.max_bytes)) {
    const auto it = records_.find(finished_.front());
    finished_.pop_front();
    if (it == records_.end()) continue;
    if (it->second.mp4) mp4_bytes_ -= static_cast<int64_t>(it->second.mp4->size());
    QS_LOG_INFO("video %s dropped: the server keeps %zu finished videos, %lld MiB of MP4 at most",
                it->first.c_str(), limits_.max_videos,
                static_cast<long long>(limits_.max_bytes >> 20));
    records_.erase(it);
  }
}

std::optional<VideoRecord> VideoStore::get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = records_.find(id);
  if (it == records_.end()) return std::nullopt;
  return it->second;
}

bool VideoStore::remove(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = records_.find(id);
  if (it == records_.end()) return false;
  if (!it->second.finished) it->second.state->cancel();
  if (it->second.mp4) mp4_bytes_ -= static_cast<int64_t>(it->second.mp4->size());
  const auto f = std::find(finished_.begin(), finished_.end(), id);
  if (f != finished_.end()) finished_.erase(f);
  records_.erase(it);
  return true;
}

std::vector<VideoRecord> VideoStore::list() const {
  std::vector<VideoRecord> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, r] : records_) out.push_back(r);
  }
  std::sort(out.begin(), out.end(),
            [](const VideoRecord& a, const VideoRecord& b) { return a.sequence < b.sequence; });
  return out;
}

VideosHandler::VideosHandler(const ModelInfo& model, VideoBackend& backend,
                             InflightRequests& inflight, VideoStoreLimits limits)
    : model_(model),
      backend_(backend),
      inflight_(inflight),
      defaults_(video_defaults(backend.pipeline())),
      store_(limits) {}

std::optional<ApiError> VideosHandler::prepare(const httplib::Request& req,
                                               const std::string& request_id, VideosRequest* r,
                                               ResolvedVideo* v) {
  if (auto e = parse_videos_request(req, r)) return e;
  for (const std::string& key : r->ignored_fields) {
    QS_LOG_WARN("request %s: the following fields were present in the request but ignored: %s",
                request_id.c_str(), key.c_str());
  }
  if (r->model && *r->model != model_.served_model_name) {
    // vLLM-Omni's behaviour: a warning, and the server's model serves the request.
    QS_LOG_WARN("request %s: model mismatch: request specifies '%s' but server is running '%s'",
                request_id.c_str(), r->model->c_str(), model_.served_model_name.c_str());
  }
  const diffusion::DiffusionPipeline& pipeline = backend_.pipeline();
  if (pipeline.requires_image() && !r->image) {
    return bad_request("This model (" + pipeline.class_name() +
                           ") makes a video from an image: upload its first frame as "
                           "input_reference (multipart/form-data), or send image_reference.",
                       "input_reference");
  }
  if (r->image && !pipeline.takes_image()) {
    return bad_request("This model (" + pipeline.class_name() +
                           ") is text to video: it takes no input_reference or image_reference.",
                       r->image_name == "image_reference" ? "image_reference" : "input_reference");
  }
  const std::string image_param =
      r->image_name == "image_reference" ? "image_reference" : "input_reference";
  std::optional<vision::RgbImage> image;
  if (r->image) {
    // diffusers' load_image: EXIF orientation applied, alpha dropped (convert("RGB")).
    vision::ImageReadOptions options;
    options.alpha = vision::AlphaMode::kDrop;
    Result<vision::RgbImage> decoded = vision::read_image_bytes(*r->image, r->image_name, options);
    if (!decoded.ok()) return bad_request(decoded.status().message(), image_param);
    image = std::move(*decoded);
    r->image.reset();  // the encoded bytes are no longer needed
  }
  *v = resolve_video(*r, defaults_, image ? &*image : nullptr, std::random_device{}());
  v->request = pipeline.resolve(std::move(v->request));
  diffusion::DiffusionRequest& w = v->request;
  if (*w.num_frames != v->asked_frames) {
    QS_LOG_WARN("request %s: %lld frames asked; %lld made (the VAE needs %lld k + 1 frames)",
                request_id.c_str(), static_cast<long long>(v->asked_frames),
                static_cast<long long>(*w.num_frames),
                static_cast<long long>(defaults_.temporal_scale));
  }
  if (image) {
    // The frame is resized to the video's size before the pipeline's checks can see it: a size
    // whose frame alone ([3, H, W] f32) is over the budget is refused before it is allocated.
    const double frame_bytes =
        12.0 * static_cast<double>(*w.width) * static_cast<double>(*w.height);
    if (frame_bytes > static_cast<double>(backend_.memory_budget_bytes())) {
      char message[256];
      std::snprintf(message, sizeof(message),
                    "A %lldx%lld first frame alone needs %.2f GiB, more than the server's video "
                    "memory budget of %.2f GiB (--video-memory-budget).",
                    static_cast<long long>(*w.width), static_cast<long long>(*w.height),
                    frame_bytes / (1 << 30),
                    static_cast<double>(backend_.memory_budget_bytes()) / (1 << 30));
      return bad_request(message);
    }
    Result<std::vector<float>> frame = vision::vae_image_input(*image, *w.width, *w.height);
    if (!frame.ok()) return bad_request(frame.status().message(), image_param);
    w.image = std::move(*frame);
  }
  if (Status s = backend_.validate(w); !s.ok()) {
    ApiError e = error_from_status(s);
    if (*w.num_frames != v->asked_frames) {
      e.message += " (" + std::to_string(v->asked_frames) + " frames asked, made " +
                   std::to_string(*w.num_frames) + ")";
    }
    return e;
  }
  return std::nullopt;
}

void VideosHandler::create_sync(const httplib::Request& req, httplib::Response& res,
                                const std::string& request_id) {
  VideosRequest r;
  ResolvedVideo v;
  if (auto e = prepare(req, request_id, &r, &v)) {
    QS_LOG_INFO("request %s rejected: %s", request_id.c_str(), e->message.c_str());
    return send_error(res, *e);
  }
  QS_LOG_INFO("request %s: video %s, %lld frames at %d fps, %lld steps, seed %llu",
              request_id.c_str(), v.size.c_str(),
              static_cast<long long>(v.request.num_frames.value_or(0)), v.fps,
              static_cast<long long>(v.request.num_inference_steps.value_or(0)),
              static_cast<unsigned long long>(v.request.seed));
  VideoJob job;
  job.request = std::move(v.request);
  job.fps = v.fps;
  job.state = std::make_shared<VideoJobState>();
  const std::shared_ptr<VideoJobState> state = job.state;
  auto session = std::make_shared<SyncSession>();
  const std::vector<std::string> ids = {"video-" + request_id};
  inflight_.add(ids);
  Status submitted = backend_.submit(std::move(job), [session](Result<VideoOutput> out) {
    std::lock_guard<std::mutex> lock(session->mu);
    session->result = std::move(out);
    session->done = true;
    session->cv.notify_all();
  });
  if (!submitted.ok()) {
    inflight_.remove(ids);
    return send_error(res, submitted.code() == StatusCode::kUnavailable
                               ? service_unavailable(submitted.message())
                               : service_unavailable("The server is shutting down."));
  }
  {
    // Nothing is sent before the MP4 is done: watch the client meanwhile.
    const std::optional<ClientConnection> connection = ClientConnection::of(req);
    std::unique_lock<std::mutex> lock(session->mu);
    while (!session->cv.wait_for(lock, kHangUpPollInterval, [&] { return session->done; })) {
      if (connection && connection->hung_up()) {
        QS_LOG_INFO("request %s: client went away, cancelling its video", request_id.c_str());
        state->cancel();
        lock.unlock();
        inflight_.remove(ids);
        res.status = kClientClosedRequest;
        return;
      }
    }
  }
  inflight_.remove(ids);
  Result<VideoOutput>& out = *session->result;
  if (!out.ok()) {
    if (!backend_.healthy())
      return send_error(res, service_unavailable("The server is shutting down."));
    return send_error(res, error_from_status(out.status()));
  }
  send_mp4(res, std::make_shared<const std::string>(std::move(out->mp4)), "video.mp4");
}

void VideosHandler::create(const httplib::Request& req, httplib::Response& res,
                           const std::string& request_id) {
  VideosRequest r;
  ResolvedVideo v;
  if (auto e = prepare(req, request_id, &r, &v)) {
    QS_LOG_INFO("request %s rejected: %s", request_id.c_str(), e->message.c_str());
    return send_error(res, *e);
  }
  VideoRecord record;
  record.id = "video_gen_" + random_request_id();
  record.model = model_.served_model_name;
  record.prompt = r.prompt;
  record.size = v.size;
  record.seconds = v.seconds;
  record.created_at = now_seconds();
  record.state = std::make_shared<VideoJobState>();
  QS_LOG_INFO("request %s: %s queued, video %s, %lld frames at %d fps, %lld steps, seed %llu",
              request_id.c_str(), record.id.c_str(), v.size.c_str(),
              static_cast<long long>(v.request.num_frames.value_or(0)), v.fps,
              static_cast<long long>(v.request.num_inference_steps.value_or(0)),
              static_cast<unsigned long long>(v.request.seed));
  VideoJob job;
  job.request = std::move(v.request);
  job.fps = v.fps;
  job.state = record.state;
  const std::string id = record.id;
  const Json queued = video_response_json(record);
  store_.add(std::move(record));
  Status submitted = backend_.submit(
      std::move(job), [this, id](Result<VideoOutput> out) { store_.finish(id, std::move(out)); });
  if (!submitted.ok()) {
    store_.remove(id);
    return send_error(res, submitted.code() == StatusCode::kUnavailable
                               ? service_unavailable(submitted.message())
                               : service_unavailable("The server is shutting down."));
  }
  res.set_content(to_wire(queued), "application/json");
}

void VideosHandler::list(const httplib::Request& req, httplib::Response& res) {
  std::string order = "desc";
  if (req.has_param("order")) order = req.get_param_value("order");
  if (order != "asc" && order != "desc") {
    return send_error(res, unprocessable_entity(
                               "'order' must be 'asc' or 'desc', got '" + order + "'.", "order"));
  }
  std::optional<size_t> limit;
  if (req.has_param("limit")) {
    const std::string text = req.get_param_value("limit");
    const bool digits =
        !text.empty() && text.size() <= 3 &&
        std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || std::stoi(text) > 100) {
      return send_error(
          res, unprocessable_entity("'limit' must be an integer from 0 to 100, got '" + text + "'.",
                                    "limit"));
    }
    limit = static_cast<size_t>(std::stoi(text));
  }
  std::vector<VideoRecord> jobs = store_.list();
  if (order == "desc") std::reverse(jobs.begin(), jobs.end());
  if (req.has_param("after")) {
    const std::string after = req.get_param_value("after");
    const auto it =
        std::find_if(jobs.begin(), jobs.end(), [&](const VideoRecord& j) { return j.id == after; });
    jobs.erase(jobs.begin(), it == jobs.end() ? jobs.end() : it + 1);
  }
  bool has_more = false;
  if (limit && jobs.size() > *limit) {
    has_more = true;
    jobs.resize(*limit);
  }
  Json data = Json::array();
  for (const VideoRecord& j : jobs) data.push_back(video_response_json(j));
  res.set_content(to_wire({{"object", "list"},
                           {"data", data},
                           {"first_id", jobs.empty() ? Json(nullptr) : Json(jobs.front().id)},
                           {"last_id", jobs.empty() ? Json(nullptr) : Json(jobs.back().id)},
                           {"has_more", has_more}}),
                  "application/json");
}

void VideosHandler::retrieve(const std::string& video_id, httplib::Response& res) {
  const std::optional<VideoRecord> r = store_.get(video_id);
  if (!r) return send_error(res, video_not_found());
  res.set_content(to_wire(video_response_json(*r)), "application/json");
}

void VideosHandler::content(const std::string& video_id, httplib::Response& res) {
  const std::optional<VideoRecord> r = store_.get(video_id);
  if (!r) return send_error(res, video_not_found());
  if (r->error) {
    return send_error(
        res, unprocessable_entity("Video generation failed. Check job status for error details."));
  }
  if (!r->mp4) {
    return send_error(res, ApiError{404, "NotFoundError", "Generation is still in-progress", ""});
  }
  send_mp4(res, r->mp4, r->id + ".mp4");
}

void VideosHandler::remove(const std::string& video_id, httplib::Response& res) {
  if (!store_.remove(video_id)) return send_error(res, video_not_found());
  QS_LOG_INFO("video %s deleted", video_id.c_str());
  res.set_content(to_wire({{"id", video_id}, {"deleted", true}, {"object", "video.deleted"}}),
                  "application/json");
}

}  // namespace qs::server
