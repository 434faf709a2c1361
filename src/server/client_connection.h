// server: the TCP connection an HTTP request came in on, so that a handler that waits a
// long time for its answer (a non-streaming generation) can notice the client hanging up.
// cpp-httplib 0.11 (Debian's) gives handlers no socket and no "connection closed" hook;
// the connection is found by its addresses among this process's open sockets instead.
#pragma once

#include <chrono>
#include <optional>

namespace httplib {
struct Request;
}  // namespace httplib

namespace qs::server {

// How often a request waiting for its whole answer (text or image) checks that its client is
// still connected: a hang-up frees what the request holds within this time.
inline constexpr std::chrono::milliseconds kHangUpPollInterval{100};
// nginx's status for a request whose client closed the connection before the answer.
inline constexpr int kClientClosedRequest = 499;

class ClientConnection {
 public:
  // The socket whose local and peer addresses are the request's; nullopt if none matches
  // (then the caller cannot watch the client and waits as before). The descriptor stays
  // valid while the handler runs: httplib closes it only after the handler has returned.
  static std::optional<ClientConnection> of(const httplib::Request& req);

  // True once the peer has closed its side or the connection failed (EOF, RDHUP, HUP or
  // ERR); bytes of a pipelined next request waiting unread do not count. Never blocks.
  bool hung_up() const;

  int fd() const { return fd_; }

 private:
  explicit ClientConnection(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace qs::server
