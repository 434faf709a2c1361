// bench_client: streamed request over HTTP (see http_stream_client.h).
#include "bench_client/http_stream_client.h"

#include <httplib.h>

#include "bench_client/sse.h"

namespace qs::bench {
namespace {

// vLLM's aiohttp session allows six hours per request; a benchmark must outlast slow servers.
constexpr time_t kReadTimeoutSeconds = 6 * 60 * 60;
constexpr time_t kConnectTimeoutSeconds = 30;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Result<Endpoint> make_endpoint(const std::string& base_url, const std::string& endpoint) {
  const size_t scheme_end = base_url.find("://");
  if (scheme_end == std::string::npos) {
    return invalid_argument("--base-url must start with http:// or https://, got '" + base_url +
                            "'");
  }
  const std::string scheme = base_url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") {
    return invalid_argument("--base-url scheme must be http or https, got '" + scheme + "'");
  }
  const size_t path_start = base_url.find('/', scheme_end + 3);
  Endpoint ep;
  ep.scheme_host_port = base_url.substr(0, path_start);
  std::string prefix = path_start == std::string::npos ? "" : base_url.substr(path_start);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (endpoint.empty() || endpoint[0] != '/') {
    return invalid_argument("--endpoint must start with '/', got '" + endpoint + "'");
  }
  ep.prefix = prefix;
  ep.path = prefix + endpoint;
  // vLLM's openai-chat backend insists on this suffix; anything else speaks completions.
  ep.chat =
      endpoint.size() >= 16 && endpoint.compare(endpoint.size() - 16, 16, "chat/completions") == 0;
  if (const char* key = std::getenv("OPENAI_API_KEY")) ep.api_key = key;
  return ep;
}

nlohmann::json request_body(const Endpoint& ep, const std::string& model, const std::string& prompt,
                            int64_t max_tokens, bool ignore_eos) {
  nlohmann::json body = {{"model", model}};
  if (ep.chat) {
    body["messages"] = nlohmann::json::array(
        {{{"role", "user"},
          {"content", nlohmann::json::array({{{"type", "text"}, {"text", prompt}}})}}});
    body["max_completion_tokens"] = max_tokens;
  } else {
    body["prompt"] = prompt;
    body["max_tokens"] = max_tokens;
  }
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (ignore_eos) body["ignore_eos"] = true;
  return body;
}

Result<ServedModel> first_served_model(const Endpoint& ep) {
  httplib::Client client(ep.scheme_host_port);
  client.set_connection_timeout(kConnectTimeoutSeconds, 0);
  httplib::Headers headers;
  if (!ep.api_key.empty()) headers.emplace("Authorization", "Bearer " + ep.api_key);
  const std::string url = ep.scheme_host_port + ep.prefix + "/v1/models";
  httplib::Result res = client.Get(ep.prefix + "/v1/models", headers);
  if (!res) return io_error("GET " + url + " failed: " + httplib::to_string(res.error()));
  if (res->status != 200) {
    return io_error("GET " + url + " answered HTTP " + std::to_string(res->status));
  }
  const nlohmann::json j = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].is_object() || !j["data"][0].contains("id") ||
      !j["data"][0]["id"].is_string()) {
    return invalid_argument("GET " + url + " lists no model (pass --model)");
  }
  ServedModel m;
  m.id = j["data"][0]["id"];
  if (j["data"][0].contains("root") && j["data"][0]["root"].is_string()) {
    m.root = j["data"][0]["root"];
  }
  return m;
}

RequestOutput send_streaming_request(const Endpoint& ep, const std::string& body,
                                     int64_t prompt_len, const std::string& request_id,
                                     std::chrono::steady_clock::time_point bench_start) {
  httplib::Client client(ep.scheme_host_port);
  client.set_connection_timeout(kConnectTimeoutSeconds, 0);
  client.set_read_timeout(kReadTimeoutSeconds, 0);

  httplib::Request req;
  req.method = "POST";
  req.path = ep.path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  req.set_header("x-request-id", request_id);
  if (!ep.api_key.empty()) req.set_header("Authorization", "Bearer " + ep.api_key);

  const double start = seconds_since(bench_start);
  StreamAccumulator acc(ep.chat, start, prompt_len);
  SseParser parser;
  int status = 0;
  std::string error_body;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      // Keep the start of an error body for the message; read the rest to end cleanly.
      if (error_body.size() < 4096) error_body.append(data, std::min<size_t>(n, 4096));
      return true;
    }
    const double t = seconds_since(bench_start);
    for (const std::string& event : parser.feed(std::string_view(data, n))) {
      acc.on_event(event, t);
    }
    return true;
  };
  httplib::Result res = client.send(req);
  if (!res) {
    RequestOutput out = acc.finish();
    out.success = false;
    out.error = "request to " + ep.scheme_host_port + ep.path +
                " failed: " + httplib::to_string(res.error());
    return out;
  }
  if (status != 200) {
    RequestOutput out = acc.finish();
    out.success = false;
    out.error = "HTTP " + std::to_string(status) + ": " + error_body;
    return out;
  }
  const double t_end = seconds_since(bench_start);
  for (const std::string& event : parser.finish()) acc.on_event(event, t_end);
  return acc.finish();
}

}  // namespace qs::bench
