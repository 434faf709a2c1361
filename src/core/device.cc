// core: device names.
#include "core/device.h"

#include <charconv>

namespace qs {

std::string device_name(Device d) {
  if (d.is_cpu()) return "cpu";
  return "cuda:" + std::to_string(d.index);
}

Result<Device> parse_device(std::string_view text) {
  if (text == "cpu") return kCpuDevice;
  if (text == "cuda") return Device{DeviceType::kCuda, 0};
  constexpr std::string_view kCudaPrefix = "cuda:";
  if (text.substr(0, kCudaPrefix.size()) == kCudaPrefix) {
    const std::string_view digits = text.substr(kCudaPrefix.size());
    int index = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty() &&
        index >= 0) {
      return Device{DeviceType::kCuda, index};
    }
  }
  return invalid_argument("unknown device '" + std::string(text) +
                          "': expected cpu, cuda or cuda:N");
}

}  // namespace qs
