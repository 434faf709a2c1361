// server: the images endpoint (see images_handler.h).
#include "server/images_handler.h"

#include <httplib.h>

#include <condition_variable>
#include <ctime>
#include <mutex>
#include <optional>
#include <random>

#include "core/log.h"
#include "diffusion/png_image.h"
#include "server/client_connection.h"
#include "server/openai_response.h"

namespace qs::server {
namespace {

// What the engine thread hands back to the waiting HTTP thread.
struct ImageSession {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::optional<Result<std::vector<diffusion::DiffusionOutput>>> result;
};

}  // namespace

std::vector<diffusion::DiffusionRequest> image_requests(
    const ImagesRequest& r, const diffusion::DiffusionPipeline& pipeline, uint64_t random_seed) {
  // What the request gave (a step count or sequence length of 0 it sent is the pipeline's to
  // refuse, not "unset"), the pipeline's defaults for the rest.
  diffusion::DiffusionRequest base;
  base.prompt = r.prompt;
  base.negative_prompt = r.negative_prompt;
  base.width = r.width;
  base.height = r.height;
  base.num_inference_steps = r.num_inference_steps;
  base.guidance_scale = r.guidance_scale;
  base.true_cfg_scale = r.true_cfg_scale;
  base.max_sequence_length = r.max_sequence_length;
  base = pipeline.resolve(std::move(base));
  const uint64_t seed = r.seed.value_or(random_seed);
  std::vector<diffusion::DiffusionRequest> out;
  for (int i = 0; i < r.n; ++i) {
    out.push_back(base);
    out.back().seed = seed + static_cast<uint64_t>(i);
  }
  return out;
}

ImagesHandler::ImagesHandler(const ModelInfo& model, ImageBackend& backend,
                             InflightRequests& inflight)
    : model_(model), backend_(backend), inflight_(inflight) {}

void ImagesHandler::handle(const httplib::Request& req, httplib::Response& res,
                           const std::string& request_id) {
  ImagesRequest r;
  if (auto e = parse_images_request(req.body, &r)) {
    QS_LOG_INFO("request %s rejected: %s", request_id.c_str(), e->message.c_str());
    return send_error(res, *e);
  }
  for (const std::string& key : r.ignored_fields) {
    QS_LOG_WARN("request %s: the following fields were present in the request but ignored: %s",
                request_id.c_str(), key.c_str());
  }
  if (r.model && *r.model != model_.served_model_name) {
    // vLLM-Omni's behaviour: a warning, and the server's model serves the request.
    QS_LOG_WARN("request %s: model mismatch: request specifies '%s' but server is running '%s'",
                request_id.c_str(), r.model->c_str(), model_.served_model_name.c_str());
  }
  ImageJob job;
  job.images = image_requests(r, backend_.pipeline(), std::random_device{}());
  job.cancelled = std::make_shared<std::atomic<bool>>(false);
  if (Status s = backend_.validate(job.images[0]); !s.ok()) {
    QS_LOG_INFO("request %s rejected: %s", request_id.c_str(), s.message().c_str());
    return send_error(res, bad_request(s.message()));
  }
  const diffusion::DiffusionRequest& first = job.images[0];
  QS_LOG_INFO("request %s: %d image(s) %lldx%lld, %lld steps, seed %llu", request_id.c_str(), r.n,
              static_cast<long long>(first.width.value_or(0)),
              static_cast<long long>(first.height.value_or(0)),
              static_cast<long long>(first.num_inference_steps.value_or(0)),
              static_cast<unsigned long long>(first.seed));

  auto session = std::make_shared<ImageSession>();
  const std::vector<std::string> ids = {"img-" + random_request_id()};
  const std::shared_ptr<std::atomic<bool>> cancelled = job.cancelled;
  inflight_.add(ids);
  Status submitted = backend_.submit(
      std::move(job), [session](Result<std::vector<diffusion::DiffusionOutput>> out) {
        std::lock_guard<std::mutex> lock(session->mu);
        session->result = std::move(out);
        session->done = true;
        session->cv.notify_all();
      });
  if (!submitted.ok()) {
    inflight_.remove(ids);
    return send_error(res, service_unavailable("The server is shutting down."));
  }
  {
    // Nothing is sent before the images are done: watch the client meanwhile.
    const std::optional<ClientConnection> connection = ClientConnection::of(req);
    std::unique_lock<std::mutex> lock(session->mu);
    while (!session->cv.wait_for(lock, kHangUpPollInterval, [&] { return session->done; })) {
      if (connection && connection->hung_up()) {
        QS_LOG_INFO("request %s: client went away, cancelling its images", request_id.c_str());
        cancelled->store(true);
        lock.unlock();
        inflight_.remove(ids);
        res.status = kClientClosedRequest;
        return;
      }
    }
  }
  inflight_.remove(ids);
  Result<std::vector<diffusion::DiffusionOutput>>& result = *session->result;
  if (!result.ok()) {
    if (!backend_.healthy())
      return send_error(res, service_unavailable("The server is shutting down."));
    return send_error(res, error_from_status(result.status()));
  }
  std::vector<std::string> pngs;
  for (const diffusion::DiffusionOutput& image : *result) {
    Result<std::string> png =
        diffusion::encode_png(image.width, image.height, diffusion::to_rgb8(image.rgb));
    if (!png.ok()) return send_error(res, error_from_status(png.status()));
    pngs.push_back(std::move(*png));
  }
  if (r.response_format == ImageResponseFormat::kFile) {
    res.set_header("Content-Disposition", "attachment; filename=\"image.png\"");
    res.set_content(pngs[0], "image/png");
    return;
  }
  res.set_content(to_wire(images_response(static_cast<int64_t>(std::time(nullptr)), pngs)),
                  "application/json");
}

}  // namespace qs::server
