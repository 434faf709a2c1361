// fuzz: config.json of every supported architecture (the seeds hold one of each), through
// parse_model_config, the declarative tensor list and the RoPE frequencies. A config the
// parser accepts must give a tensor list whose shapes are positive and whose products fit.
#include <cstdint>

#include "core/check.h"
#include "core/limits.h"
#include "models/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto json = nlohmann::json::parse(data, data + size, nullptr, false);
  if (json.is_discarded()) return 0;
  auto config = qs::models::parse_model_config(json);
  if (!config.ok()) return 0;
  QS_CHECK(static_cast<int64_t>(config->sliding_window.size()) == config->n_layers);
  for (const auto& spec : qs::models::expected_tensors(*config)) {
    QS_CHECK(qs::limits::checked_numel(spec.shape, spec.name).ok());
  }
  QS_CHECK(static_cast<int64_t>(qs::models::rope_inv_freq(*config).size()) == config->head_dim / 2);
  return 0;
}
