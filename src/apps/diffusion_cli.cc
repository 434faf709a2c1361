#include "apps/diffusion_cli.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <utility>

#include "core/mmap_file.h"
#include "diffusion/pipeline_registry.h"
#include "io/checkpoint.h"

namespace qs::apps {

Status require_pipeline_output(const std::string& dir, diffusion::PipelineOutput want,
                               const char* command) {
  QS_ASSIGN_OR_RETURN(const diffusion::PipelineIndex index, diffusion::read_pipeline_index(dir));
  if (index.family->output == want) return ok_status();
  return invalid_argument(dir + " is a " + index.family->name + " " +
                          diffusion::pipeline_output_name(index.family->output) + " pipeline (" +
                          index.class_name + "): " + index.family->command + " runs it, not " +
                          command);
}

Result<std::vector<float>> read_noise_file(const std::string& path, int rank,
                                           const std::string& layout) {
  QS_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(path));
  std::vector<std::pair<std::string, Tensor>> tensors;
  QS_RETURN_IF_ERROR(io::read_safetensors(file, &tensors, nullptr).with_context(path));
  const Tensor* t = nullptr;
  for (const auto& [name, tensor] : tensors) {
    if (name == "noise" || tensors.size() == 1) t = &tensor;
  }
  if (!t) return invalid_argument(path + ": no tensor named \"noise\" (and more than one tensor)");
  if (!dtype_is_float(t->dtype) || t->rank() < rank || t->rank() > rank + 1 ||
      (t->rank() == rank + 1 && t->dim(0) != 1)) {
    return invalid_argument(path + ": the noise must be a float " + layout + " or [1, " +
                            layout.substr(1) + " tensor, found " + shape_string(t->shape));
  }
  return t->to_f32();
}

Result<std::vector<float>> read_pipeline_noise(const std::string& path,
                                               const diffusion::DiffusionPipeline& pipeline) {
  const std::vector<std::string> dims = pipeline.latents_dims();
  std::string layout = "[";
  for (size_t i = 0; i < dims.size(); ++i) layout += (i ? ", " : "") + dims[i];
  return read_noise_file(path, static_cast<int>(dims.size()), layout + "]");
}

Result<diffusion::DiffusionOutput> generate_with_progress(const char* command,
                                                          const diffusion::DiffusionPipeline& pipe,
                                                          diffusion::DiffusionRequest req,
                                                          ThreadPool& pool,
                                                          GenerationTimes* times) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const bool tty = isatty(STDERR_FILENO) != 0;
  const bool video = pipe.output() == diffusion::PipelineOutput::kVideo;
  auto last = t0;
  req.on_step = [&](int64_t i, int64_t n, const std::vector<float>&) {
    const auto now = clock::now();
    const double step_s = std::chrono::duration<double>(now - last).count();
    const double total_s = std::chrono::duration<double>(now - t0).count();
    last = now;
    if (!tty) return;
    const double eta = total_s / static_cast<double>(i + 1) * static_cast<double>(n - i - 1);
    std::fprintf(stderr, "\r\033[K%s: step %lld/%lld  %.2f s/step  elapsed %.1f s  ETA %.1f s%s",
                 command, static_cast<long long>(i + 1), static_cast<long long>(n), step_s, total_s,
                 eta, video ? " (then the VAE)" : "");
    if (i + 1 == n) std::fprintf(stderr, "\n");
  };
  diffusion::DiffusionOutput steps;
  QS_ASSIGN_OR_RETURN(std::vector<float> latents, pipe.denoise(req, pool, &steps));
  const auto t1 = clock::now();
  QS_ASSIGN_OR_RETURN(diffusion::DiffusionOutput out, pipe.decode(std::move(latents), req, pool));
  const auto t2 = clock::now();
  out.step_seconds = std::move(steps.step_seconds);
  out.exchange_seconds = std::move(steps.exchange_seconds);
  if (times) {
    times->denoise_seconds = std::chrono::duration<double>(t1 - t0).count();
    times->decode_seconds = std::chrono::duration<double>(t2 - t1).count();
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
}

}  // namespace qs::apps
