// server: vLLM-Omni's videos API on a video pipeline server. POST /v1/videos/sync and POST
// /v1/videos parse the form (videos_request.h), decode the first frame of an image-to-video
// request, resolve the video's size and frames as vLLM-Omni does and have the backend check
// them and the memory budget, all before anything is queued (a mistake is a 400 at once).
// /sync then waits for the MP4 and answers its bytes, watching its client: a client that hangs
// up cancels the job (between steps if it is running). POST /v1/videos answers the job's
// VideoResponse at once; GET /v1/videos/{id} polls it, GET /v1/videos/{id}/content downloads
// the MP4, GET /v1/videos lists the jobs and DELETE /v1/videos/{id} cancels and forgets one.
//
// Finished jobs are kept in memory up to VideoStoreLimits (a count of finished jobs and the
// bytes of their MP4s); past either, the job that finished first is forgotten (its id then
// answers 404), but the newest one always stays. Queued and running jobs are never dropped.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "server/generation_handler.h"
#include "server/video_backend.h"
#include "server/videos_request.h"
#include "vision/image_file.h"

namespace qs::server {

struct VideoStoreLimits {
  size_t max_videos = 100;        // finished jobs kept (completed or failed)
  int64_t max_bytes = 1ll << 30;  // bytes of their MP4s
};

// The size and frame rules a request is resolved with (the pipeline's; these values are
// Wan2.2's 480p).
struct VideoDefaults {
  int64_t width = 832, height = 480;
  int64_t num_frames = 81;
  int fps = 16;
  int64_t spatial_multiple = 16;  // an image's aspect-derived size is rounded down to this
  int64_t temporal_scale = 4;     // frames are temporal_scale * k + 1
};

// A video pipeline's: its resolve() of an empty request, default_fps(), spatial_multiple() and
// frame_multiple().
VideoDefaults video_defaults(const diffusion::DiffusionPipeline& pipeline);

// A request resolved into the pipeline's terms, without the first frame. The fields the
// request left out other than size and frames stay unset, for the pipeline's resolve().
struct ResolvedVideo {
  diffusion::DiffusionRequest request;
  int fps = 16;
  int64_t asked_frames = 0;  // before rounding to temporal_scale * k + 1
  std::string size;          // "WxH"
  std::string seconds;       // as asked, else the clip's length rounded up to whole seconds
};

// vLLM-Omni's resolve_video_params and its Wan pipelines' rules: `size` over width/height; a
// side left out is the default, or for image to video derived from the image's aspect ratio
// at the default size's area (rounded down to spatial_multiple); fps defaults to the model's;
// frames are num_frames, else seconds x fps, else the default, then made temporal_scale * k + 1
// as diffusers does (k = frames / temporal_scale, rounded down). No seed: `random_seed`.
ResolvedVideo resolve_video(const VideosRequest& r, const VideoDefaults& defaults,
                            const vision::RgbImage* image, uint64_t random_seed);

// One async job as GET /v1/videos/{id} shows it.
struct VideoRecord {
  std::string id;  // "video_gen_<32 hex digits>"
  std::string model, prompt, size, seconds;
  int64_t created_at = 0;
  std::shared_ptr<VideoJobState> state;  // progress while queued or running
  bool finished = false;
  std::optional<int64_t> completed_at;
  std::optional<Status> error;  // a failed job's
  std::shared_ptr<const std::string> mp4;
  std::optional<double> inference_time_s;
  std::vector<std::pair<std::string, double>> stage_seconds;
  std::optional<double> peak_memory_mb;
  uint64_t sequence = 0;  // creation order, for listing
};

// vLLM-Omni's VideoResponse for a record.
Json video_response_json(const VideoRecord& record);

// The async jobs; safe on any thread.
class VideoStore {
 public:
  explicit VideoStore(VideoStoreLimits limits) : limits_(limits) {}

  void add(VideoRecord record);
  // The job's end (from the engine thread): nothing happens if it was deleted meanwhile.
  void finish(const std::string& id, Result<VideoOutput> out);
  std::optional<VideoRecord> get(const std::string& id) const;
  // Removes the job, cancelling it if it is still queued or running; false if unknown.
  bool remove(const std::string& id);
  // Every job, oldest first.
  std::vector<VideoRecord> list() const;

 private:
  void evict();  // under mu_

  const VideoStoreLimits limits_;
  mutable std::mutex mu_;
  std::map<std::string, VideoRecord> records_;
  std::deque<std::string> finished_;  // ids in the order they finished
  int64_t mp4_bytes_ = 0;
  uint64_t next_sequence_ = 0;
};

class VideosHandler {
 public:
  // All references must outlive the handler.
  VideosHandler(const ModelInfo& model, VideoBackend& backend, InflightRequests& inflight,
                VideoStoreLimits limits = {});

  void create(const httplib::Request& req, httplib::Response& res, const std::string& request_id);
  void create_sync(const httplib::Request& req, httplib::Response& res,
                   const std::string& request_id);
  void list(const httplib::Request& req, httplib::Response& res);
  void retrieve(const std::string& video_id, httplib::Response& res);
  void content(const std::string& video_id, httplib::Response& res);
  void remove(const std::string& video_id, httplib::Response& res);

 private:
  // Parse, first frame, resolve, validate: the job ready to submit, or the client's error.
  std::optional<ApiError> prepare(const httplib::Request& req, const std::string& request_id,
                                  VideosRequest* parsed, ResolvedVideo* resolved);

  const ModelInfo& model_;
  VideoBackend& backend_;
  InflightRequests& inflight_;
  const VideoDefaults defaults_;  // the backend's pipeline's
  VideoStore store_;
};

}  // namespace qs::server
