// server: what every quantserve HTTP front (the server, the data-parallel front) does to each
// request alike: the X-Request-Id it answers with (the client's, or a fresh one), OpenAI's
// error envelope on bodiless errors (404, 413, ...) and on exceptions, and the access log line.
#pragma once

#include <string>

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

}  // namespace qs::server
