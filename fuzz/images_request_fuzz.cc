// fuzz: POST /v1/images/generations bodies as the server receives them. The body is parsed
// (parse_images_request), an accepted one is turned into the pipeline's requests
// (image_requests) and checked by the tiny FLUX.1 fixture's validate, through the
// DiffusionPipeline interface as the handler does before queueing.
// Every outcome must be an accepted request that keeps the parser's promises (n 1-10, sizes
// positive, seeds counting up) or an ApiError the server can send; nothing may throw.
#include <cstdint>
#include <memory>

#include "core/check.h"
#include "diffusion/pipeline.h"
#include "fuzz_util.h"
#include "server/images_handler.h"
#include "server/images_request.h"
#include "server/openai_response.h"

namespace {

void check_error(const qs::server::ApiError& e) {
  QS_CHECK(e.http_status == 400 || e.http_status == 422);
  QS_CHECK(!e.message.empty());
  QS_CHECK(!qs::server::to_wire(e.to_json()).empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qs::server;
  static const std::unique_ptr<qs::diffusion::DiffusionPipeline> pipeline = [] {
    auto p =
        qs::diffusion::load_pipeline(QS_SOURCE_DIR "/tests/golden/fixtures/flux/tiny_pipeline");
    QS_CHECK(p.ok());
    return std::move(*p);
  }();
  const std::string body(reinterpret_cast<const char*>(data), size);
  ImagesRequest r;
  if (const auto e = parse_images_request(body, &r)) {
    check_error(*e);
    return 0;
  }
  QS_CHECK(r.n >= 1 && r.n <= 10);
  QS_CHECK(r.width.has_value() == r.height.has_value());
  if (r.width) QS_CHECK(*r.width > 0 && *r.height > 0);
  const auto reqs = image_requests(r, *pipeline, 12345);
  QS_CHECK(static_cast<int>(reqs.size()) == r.n);
  for (size_t i = 1; i < reqs.size(); ++i) QS_CHECK(reqs[i].seed == reqs[0].seed + i);
  const qs::Status s = pipeline->validate(reqs[0]);
  if (!s.ok()) check_error(bad_request(s.message()));
  (void)to_wire(images_response(0, {r.prompt}));
  return 0;
}
