// core: where a tensor's bytes live. A CPU tensor's pointer may be read by any host code; a
// device tensor's only by its backend (ops/backend.h), which owns the copies between the two.
// Spelled as PyTorch and vLLM spell it on the command line: "cpu", "cuda", "cuda:1".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace qs {

enum class DeviceType : uint8_t { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;  // which device of its type; always 0 for the CPU

  bool is_cpu() const { return type == DeviceType::kCpu; }
  friend bool operator==(const Device&, const Device&) = default;
};

inline constexpr Device kCpuDevice{};

// "cpu", "cuda:0".
std::string device_name(Device d);
// "cpu", "cuda" (= "cuda:0") or "cuda:N"; anything else is an error listing the spellings.
// ("auto" is the caller's to resolve: it depends on which backends this build and machine have.)
Result<Device> parse_device(std::string_view text);

}  // namespace qs
