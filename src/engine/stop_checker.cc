// engine: StopChecker (see stop_checker.h). Byte-wise search is safe on UTF-8: a stop string
// starts with a lead byte, so any match or held-back tail starts on a character boundary.
#include "engine/stop_checker.h"

#include <algorithm>

namespace qs {

StopChecker::StopChecker(const SamplingParams& params, std::vector<int32_t> eos_ids)
    : stop_token_ids_(params.stop_token_ids), include_stop_str_(params.include_stop_str_in_output) {
  if (!params.ignore_eos) eos_ids_ = std::move(eos_ids);
  // validate() rejects empty stop strings; one that slipped through would match everywhere.
  for (const auto& s : params.stop) {
    if (!s.empty()) stop_.push_back(s);
  }
}

bool StopChecker::is_eos(int32_t token) const {
  return std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end();
}

bool StopChecker::is_stop_token_id(int32_t token) const {
  return std::find(stop_token_ids_.begin(), stop_token_ids_.end(), token) != stop_token_ids_.end();
}

std::optional<StopStringMatch> StopChecker::find_stop_string(std::string_view text,
                                                             size_t n_new) const {
  if (n_new == 0) return std::nullopt;
  std::optional<StopStringMatch> best;
  size_t best_pos = std::string_view::npos;
  for (const auto& s : stop_) {
    // A match touching new text starts at or after size - n_new - |s| + 1.
    const size_t reach = n_new + s.size() - 1;
    const size_t from = text.size() > reach ? text.size() - reach : 0;
    const size_t pos = text.find(s, from);
    if (pos == std::string_view::npos || pos >= best_pos) continue;
    best_pos = pos;
    best = StopStringMatch{include_stop_str_ ? pos + s.size() : pos, s};
  }
  return best;
}

size_t StopChecker::holdback(std::string_view text) const {
  if (include_stop_str_) return 0;
  size_t held = 0;
  for (const auto& s : stop_) {
    for (size_t k = std::min(s.size() - 1, text.size()); k > held; --k) {
      if (text.ends_with(std::string_view(s).substr(0, k))) {
        held = k;
        break;
      }
    }
  }
  return held;
}

}  // namespace qs
