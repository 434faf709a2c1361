// server: the handlers every HTTP front shares (see http_envelope.h).
#include "server/http_envelope.h"

#include <httplib.h>

#include <exception>

#include "core/log.h"
#include "server/generation_handler.h"
#include "server/openai_request.h"

namespace qs::server {

std::string assign_request_id(const httplib::Request& req, httplib::Response& res) {
  std::string id = req.get_header_value(kRequestIdHeader);
  if (id.empty()) id = random_request_id();
  res.set_header(kRequestIdHeader, id);
  return id;
}

void install_error_envelope_and_access_log(httplib::Server& s) {
  // Errors without a body (unknown path: 404, body too large: 413, ...) get the envelope.
  s.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty() || res.content_provider_) {
          return httplib::Server::HandlerResponse::Unhandled;
        }
        ApiError e{res.status, res.status == 404 ? "NotFoundError" : "BadRequestError",
                   res.status == 404   ? "Not Found: " + req.method + " " + req.path
                   : res.status == 413 ? "The request body is too large."
                                       : "HTTP error " + std::to_string(res.status) + ".",
                   ""};
        send_error(res, e);
        return httplib::Server::HandlerResponse::Handled;
      }));
  s.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        QS_LOG_ERROR("%s %s: %s", req.method.c_str(), req.path.c_str(), what.c_str());
        send_error(res, internal_server_error(what));
      });
  // One line per request, written when the response (a whole stream included) has gone.
  s.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    QS_LOG_INFO("%s:%d \"%s %s %s\" %d request_id=%s", req.remote_addr.c_str(), req.remote_port,
                req.method.c_str(), req.path.c_str(), req.version.c_str(), res.status,
                res.get_header_value(kRequestIdHeader).c_str());
  });
}

Result<int> bind_listener(httplib::Server& s, const std::string& host, int port) {
  const int bound = port == 0 ? s.bind_to_any_port(host) : s.bind_to_port(host, port) ? port : -1;
  if (bound <= 0) {
    return io_error("cannot listen on " + host + ":" + std::to_string(port) +
                    " (address in use, or not an address of this machine)");
  }
  return bound;
}

}  // namespace qs::server
