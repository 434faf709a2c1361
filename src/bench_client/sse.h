// bench_client: a Server-Sent Events parser for streamed OpenAI responses. Bytes arrive in whatever
// pieces the socket delivers (an event may be split anywhere, even inside "\r\n"), so the
// parser keeps the partial line and the event being built between calls.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace qs::bench {

class SseParser {
 public:
  // Feeds received bytes; returns the `data` payload of every event completed by them (an
  // event ends at a blank line; several data lines join with "\n"; ":" lines are comments;
  // other fields are ignored).
  std::vector<std::string> feed(std::string_view bytes);
  // End of stream: the payload of an event the server did not close with a blank line, if any.
  std::vector<std::string> finish();

 private:
  void line(std::string_view l, std::vector<std::string>& out);

  std::string partial_;  // bytes after the last line ending
  std::string data_;     // data lines of the event being built
  bool has_data_ = false;
};

}  // namespace qs::bench
