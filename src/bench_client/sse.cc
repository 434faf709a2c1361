// bench_client: SSE parsing (see sse.h). Line endings are "\n", "\r\n" or a lone "\r" (the SSE
// spec).
#include "bench_client/sse.h"

namespace qs::bench {

std::vector<std::string> SseParser::feed(std::string_view bytes) {
  std::vector<std::string> out;
  partial_.append(bytes);
  size_t start = 0;
  for (;;) {
    const size_t end = partial_.find_first_of("\r\n", start);
    if (end == std::string::npos) break;
    // A "\r" at the very end may be the first half of "\r\n": wait for the next byte.
    if (partial_[end] == '\r' && end + 1 == partial_.size()) break;
    line(std::string_view(partial_).substr(start, end - start), out);
    start = end + ((partial_[end] == '\r' && partial_[end + 1] == '\n') ? 2 : 1);
  }
  partial_.erase(0, start);
  return out;
}

std::vector<std::string> SseParser::finish() {
  std::vector<std::string> out;
  if (!partial_.empty()) {
    std::string rest;
    rest.swap(partial_);
    if (rest.back() == '\r') rest.pop_back();
    line(rest, out);
  }
  line("", out);
  return out;
}

void SseParser::line(std::string_view l, std::vector<std::string>& out) {
  if (l.empty()) {
    if (has_data_) out.push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (l[0] == ':') return;
  const size_t colon = l.find(':');
  const std::string_view field = l.substr(0, colon);
  if (field != "data") return;
  std::string_view value = colon == std::string_view::npos ? "" : l.substr(colon + 1);
  if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  if (has_data_) data_.push_back('\n');
  data_.append(value);
  has_data_ = true;
}

}  // namespace qs::bench
