// fuzz: generation_config.json, parsed and written back; what parses must round-trip.
#include <cstdint>

#include "core/check.h"
#include "io/generation_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto json = nlohmann::json::parse(data, data + size, nullptr, false);
  if (json.is_discarded()) return 0;
  auto config = qs::io::parse_generation_config(json, "generation_config.json");
  if (!config.ok()) return 0;
  const auto again = qs::io::parse_generation_config(qs::io::generation_config_to_json(*config),
                                                     "generation_config.json");
  QS_CHECK(again.ok());
  return 0;
}
