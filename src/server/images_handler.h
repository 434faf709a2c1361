// server: POST /v1/images/generations on a pipeline server. The body is parsed, filled in
// with the pipeline's defaults and validated by the pipeline before anything is queued (a
// bad size or step count is a 400 at once); then one ImageJob of n images goes to the
// ImageBackend and the HTTP thread waits, watching its client: a client that hangs up
// cancels the job (between steps if it is running). The PNGs are encoded here, off the engine
// thread, and sent as b64_json or, with response_format "file", as the raw PNG.
#pragma once

#include <string>

#include "server/generation_handler.h"
#include "server/image_backend.h"
#include "server/images_request.h"

namespace qs::server {

class ImagesHandler {
 public:
  // All references must outlive the handler.
  ImagesHandler(const ModelInfo& model, ImageBackend& backend, InflightRequests& inflight);

  void handle(const httplib::Request& req, httplib::Response& res, const std::string& request_id);

 private:
  const ModelInfo& model_;
  ImageBackend& backend_;
  InflightRequests& inflight_;
};

// The pipeline requests of one images request, resolved by `pipeline` (its defaults for what
// the request left out), with seeds seed, seed + 1, ... (one random seed when it gave none).
std::vector<diffusion::DiffusionRequest> image_requests(
    const ImagesRequest& r, const diffusion::DiffusionPipeline& pipeline, uint64_t random_seed);

}  // namespace qs::server
