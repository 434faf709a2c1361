// server: what every quantserve HTTP front (the server, the data-parallel front) does alike: its
// listening socket, and for each request the X-Request-Id it answers with (the client's, or a
// fresh one), OpenAI's error envelope on bodiless errors (404, 413, ...) and on exceptions, and
// the access log line.
#pragma once

#include <string>

#include "core/status.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace qs::server {

inline constexpr const char* kRequestIdHeader = "X-Request-Id";

// Sets the response's X-Request-Id from the request's, or a fresh id; returns it.
std::string assign_request_id(const httplib::Request& req, httplib::Response& res);

// The error handler, exception handler and access logger described above.
void install_error_envelope_and_access_log(httplib::Server& s);

// Binds `s` to host:port (port 0: any free one) and returns the port, or an io_error that says
// why a user's --host/--port cannot be listened on.
Result<int> bind_listener(httplib::Server& s, const std::string& host, int port);

}  // namespace qs::server
