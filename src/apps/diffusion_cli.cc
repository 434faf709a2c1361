#include "apps/diffusion_cli.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "core/mmap_file.h"
#include "io/checkpoint.h"

namespace qs::apps {

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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
}

}  // namespace qs::apps
