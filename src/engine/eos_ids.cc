// engine: a checkpoint's EOS ids (see eos_ids.h).
#include "engine/eos_ids.h"

#include <algorithm>

namespace qs::engine {

std::vector<int32_t> merged_eos_ids(const models::ModelConfig& config,
                                    const io::GenerationConfig& gen,
                                    const tok::Tokenizer& tokenizer) {
  std::vector<int32_t> eos = config.eos_token_ids;
  for (int64_t id : gen.eos_token_ids) eos.push_back(static_cast<int32_t>(id));
  if (tokenizer.eos_id() >= 0) eos.push_back(tokenizer.eos_id());
  std::sort(eos.begin(), eos.end());
  eos.erase(std::unique(eos.begin(), eos.end()), eos.end());
  return eos;
}

}  // namespace qs::engine
