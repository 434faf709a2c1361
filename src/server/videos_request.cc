// server: /v1/videos request parsing (see videos_request.h). Field names and bounds are
// vLLM-Omni's (protocol/videos.py, api_server.py's create_video form).
#include "server/videos_request.h"

#include <httplib.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "server/images_request.h"
#include "server/json_fields.h"
#include "server/media_url.h"

namespace qs::server {
namespace {

// Integers past this are no frame count, side or step count of any video; the bound keeps the
// arithmetic on them (seconds x fps, width x height) far from overflowing.
constexpr int64_t kMaxInt = 999999999;
// The MP4 writer's frame rates (vision::VideoWriteOptions).
constexpr int64_t kMaxFps = 240;

// Fields read below.
const std::set<std::string>& handled_fields() {
  static const std::set<std::string> kFields = {"prompt",
                                                "model",
                                                "negative_prompt",
                                                "size",
                                                "width",
                                                "height",
                                                "num_frames",
                                                "seconds",
                                                "fps",
                                                "input_reference",
                                                "image_reference",
                                                "num_inference_steps",
                                                "guidance_scale",
                                                "guidance_scale_2",
                                                "boundary_ratio",
                                                "flow_shift",
                                                "seed",
                                                "max_sequence_length",
                                                "user"};
  return kFields;
}

// vLLM-Omni's options that would change the video and that Wan on this server cannot honour:
// a 400 when set, rather than a video that silently ignores them.
const std::set<std::string>& unsupported_fields() {
  static const std::set<std::string> kFields = {
      "video_reference", "audio_reference",  "control_reference", "source_video",
      "source_audio",    "video_noise_mask", "audio_noise_mask",  "lora"};
  return kFields;
}

// Booleans vLLM-Omni accepts that only matter when true.
const std::set<std::string>& unsupported_flags() {
  static const std::set<std::string> kFields = {"generate_sound", "enable_frame_interpolation"};
  return kFields;
}

// The body's fields as text, whatever carried them: form parts and urlencoded pairs are text
// already; JSON scalars are written as a form would send them.
class FormFields {
 public:
  static std::optional<ApiError> of(const httplib::Request& req, FormFields* out) {
    out->req_ = &req;
    const std::string type = req.get_header_value("Content-Type");
    if (req.is_multipart_form_data()) {
      out->kind_ = Kind::kMultipart;
    } else if (type.rfind("application/x-www-form-urlencoded", 0) == 0) {
      out->kind_ = Kind::kUrlencoded;
    } else if (type.rfind("application/json", 0) == 0) {
      out->kind_ = Kind::kJson;
      if (auto e = parse_body(req.body, &out->json_)) {
        return unprocessable_entity(e->message);
      }
    } else {
      return unprocessable_entity(
          "The body must be multipart/form-data (as vLLM-Omni takes it), a urlencoded form or "
          "a JSON object; got Content-Type '" +
          type + "'.");
    }
    return std::nullopt;
  }

  // The field's text; nullopt when absent (or JSON null). The first part of a repeated name
  // counts, as in the transcriptions form.
  std::optional<std::string> text(const std::string& key) const {
    switch (kind_) {
      case Kind::kMultipart: {
        const auto it = req_->files.find(key);
        if (it == req_->files.end()) return std::nullopt;
        return it->second.content;
      }
      case Kind::kUrlencoded: {
        const auto it = req_->params.find(key);
        if (it == req_->params.end()) return std::nullopt;
        return it->second;
      }
      case Kind::kJson: {
        const auto it = json_.find(key);
        if (it == json_.end() || it->is_null()) return std::nullopt;
        if (it->is_string()) return it->get<std::string>();
        if (it->is_boolean()) return std::string(it->get<bool>() ? "true" : "false");
        if (it->is_number_float()) {
          const double d = it->get<double>();
          if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) {
            return std::to_string(static_cast<int64_t>(d));
          }
        }
        return it->dump();
      }
    }
    return std::nullopt;
  }

  // JSON bodies must carry strings as strings (pydantic's str rejects 1); forms are all text.
  std::optional<ApiError> string(const std::string& key, std::optional<std::string>* out) const {
    if (kind_ == Kind::kJson) {
      const auto it = json_.find(key);
      if (it != json_.end() && !it->is_null() && !it->is_string()) {
        return unprocessable_entity("'" + key + "' must be a string.", key);
      }
    }
    *out = text(key);
    return std::nullopt;
  }

  // The part of that name (an upload when it has a filename), if the body is a multipart form.
  const httplib::MultipartFormData* file(const std::string& key) const {
    if (kind_ != Kind::kMultipart) return nullptr;
    const auto it = req_->files.find(key);
    return it == req_->files.end() ? nullptr : &it->second;
  }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    auto add = [&out](const std::string& name) {
      if (out.empty() || out.back() != name) out.push_back(name);
    };
    if (kind_ == Kind::kMultipart) {
      for (const auto& [name, part] : req_->files) add(name);
    } else if (kind_ == Kind::kUrlencoded) {
      for (const auto& [name, value] : req_->params) add(name);
    } else {
      for (const auto& [name, value] : json_.items()) add(name);
    }
    return out;
  }

 private:
  enum class Kind { kMultipart, kUrlencoded, kJson };
  Kind kind_ = Kind::kJson;
  const httplib::Request* req_ = nullptr;
  Json json_;
};

// A whole decimal integer, optionally signed, within +-kMaxInt.
bool parse_int(const std::string& text, int64_t* out) {
  size_t i = (!text.empty() && (text[0] == '-' || text[0] == '+')) ? 1 : 0;
  if (i == text.size() || text.size() - i > 9) return false;
  int64_t v = 0;
  for (; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    v = v * 10 + (text[i] - '0');
  }
  *out = text[0] == '-' ? -v : v;
  return true;
}

std::optional<ApiError> read_int(const FormFields& form, const std::string& key, int64_t lo,
                                 int64_t hi, std::optional<int64_t>* out) {
  const std::optional<std::string> text = form.text(key);
  if (!text) return std::nullopt;
  int64_t v = 0;
  if (!parse_int(*text, &v)) {
    return unprocessable_entity(
        "'" + key + "' must be an integer of at most 9 digits, got '" + *text + "'.", key);
  }
  if (v < lo || v > hi) {
    return bad_request("'" + key + "' must be between " + std::to_string(lo) + " and " +
                           std::to_string(hi) + ", got " + std::to_string(v) + ".",
                       key);
  }
  *out = v;
  return std::nullopt;
}

// A finite number in [lo, hi] (pydantic's ge/le also refuse NaN).
std::optional<ApiError> read_number(const FormFields& form, const std::string& key, double lo,
                                    double hi, std::optional<double>* out) {
  const std::optional<std::string> text = form.text(key);
  if (!text) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text->c_str(), &end);
  if (text->empty() || end != text->c_str() + text->size() || errno == ERANGE ||
      !std::isfinite(v)) {
    return unprocessable_entity("'" + key + "' must be a number, got '" + *text + "'.", key);
  }
  if (v < lo || v > hi) {
    char bounds[64];
    std::snprintf(bounds, sizeof(bounds), "between %g and %g", lo, hi);
    return bad_request("'" + key + "' must be " + bounds + ", got " + *text + ".", key);
  }
  *out = v;
  return std::nullopt;
}

// pydantic's bool from text: true/false, 1/0, yes/no, on/off, t/f, y/n, any case.
std::optional<ApiError> read_flag(const FormFields& form, const std::string& key, bool* out) {
  const std::optional<std::string> text = form.text(key);
  if (!text) return std::nullopt;
  std::string lower;
  for (char c : *text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::set<std::string> kTrue = {"true", "1", "yes", "on", "t", "y"};
  static const std::set<std::string> kFalse = {"false", "0", "no", "off", "f", "n"};
  if (kTrue.count(lower)) {
    *out = true;
  } else if (kFalse.count(lower)) {
    *out = false;
  } else {
    return unprocessable_entity("'" + key + "' must be a boolean, got '" + *text + "'.", key);
  }
  return std::nullopt;
}

// vLLM-Omni's SizeStr (^\d+x\d+$) is the schema; parse_image_size then refuses zero sides.
std::optional<ApiError> read_size(const FormFields& form, VideosRequest* r) {
  std::optional<std::string> size;
  if (auto e = form.string("size", &size)) return e;
  if (!size) return std::nullopt;
  const size_t x = size->find('x');
  auto digits = [](const std::string& s) {
    if (s.empty()) return false;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
    }
    return true;
  };
  if (x == std::string::npos || !digits(size->substr(0, x)) || !digits(size->substr(x + 1))) {
    return unprocessable_entity(
        "'size' must be WIDTHxHEIGHT (e.g. '832x480'), got '" + *size + "'.", "size");
  }
  int64_t w = 0, h = 0;
  if (auto e = parse_image_size(*size, &w, &h)) return e;
  r->width = w;
  r->height = h;
  return std::nullopt;
}

// vLLM-Omni's SecondStr: a positive whole number without leading zeros.
std::optional<ApiError> read_seconds(const FormFields& form, VideosRequest* r) {
  const std::optional<std::string> text = form.text("seconds");
  if (!text) return std::nullopt;
  int64_t v = 0;
  if (text->empty() || (*text)[0] < '1' || (*text)[0] > '9' || !parse_int(*text, &v)) {
    return unprocessable_entity(
        "'seconds' must be a positive whole number of at most 9 digits, got '" + *text + "'.",
        "seconds");
  }
  r->seconds = v;
  return std::nullopt;
}

// image_reference: vLLM-Omni's {"image_url": ...} or {"file_id": ...}, as a JSON string in a
// form or an object in a JSON body. Only data: URLs are read (this server fetches nothing).
std::optional<ApiError> read_image_reference(const std::string& text, VideosRequest* r) {
  const std::string param = "image_reference";
  const Json ref = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (ref.is_discarded() || !ref.is_object()) {
    return bad_request("'image_reference' must be a JSON object such as {\"image_url\": ...}.",
                       param);
  }
  if (ref.contains("file_id")) {
    return bad_request(
        "file_id references are not supported; upload the image as input_reference or send "
        "{\"image_url\": \"data:image/png;base64,...\"}.",
        param);
  }
  const auto url = ref.find("image_url");
  if (url == ref.end() || !url->is_string() || ref.size() != 1) {
    return bad_request("'image_reference' must be {\"image_url\": \"data:...\"}.", param);
  }
  std::string bytes;
  if (auto e = load_media_url(url->get<std::string>(), "", &bytes)) {
    e->param = param;
    return e;
  }
  r->image = std::move(bytes);
  r->image_name = "image_reference";
  return std::nullopt;
}

std::optional<ApiError> read_image(const FormFields& form, VideosRequest* r) {
  const std::optional<std::string> reference = form.text("image_reference");
  const httplib::MultipartFormData* upload = form.file("input_reference");
  if (!upload && form.text("input_reference")) {
    return bad_request(
        "'input_reference' must be a file part of a multipart/form-data body "
        "(curl -F input_reference=@image.png); in JSON send image_reference instead.",
        "input_reference");
  }
  if (upload && reference) {
    return bad_request("Provide either input_reference or image_reference, not both.",
                       "input_reference");
  }
  if (reference) return read_image_reference(*reference, r);
  if (!upload) return std::nullopt;
  if (upload->filename.empty()) {
    return unprocessable_entity(
        "'input_reference' must be an uploaded file (a part with a filename), not a text field.",
        "input_reference");
  }
  if (upload->content.empty()) {
    return bad_request("input_reference '" + upload->filename + "' is empty.", "input_reference");
  }
  r->image = upload->content;
  r->image_name = upload->filename;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_videos_request(const httplib::Request& req, VideosRequest* r) {
  FormFields form;
  if (auto e = FormFields::of(req, &form)) return e;
  *r = VideosRequest{};

  std::optional<std::string> prompt;
  if (auto e = form.string("prompt", &prompt)) return e;
  if (!prompt) return unprocessable_entity("'prompt' is required.", "prompt");
  r->prompt = std::move(*prompt);
  if (auto e = form.string("model", &r->model)) return e;
  if (r->model && r->model->empty()) r->model.reset();
  std::optional<std::string> text;
  if (auto e = form.string("negative_prompt", &text)) return e;
  r->negative_prompt = text.value_or("");
  if (auto e = form.string("user", &text)) return e;
  r->user = text.value_or("");

  if (auto e = read_int(form, "width", 1, kMaxInt, &r->width)) return e;
  if (auto e = read_int(form, "height", 1, kMaxInt, &r->height)) return e;
  if (auto e = read_size(form, r)) return e;
  if (auto e = read_int(form, "num_frames", 1, kMaxInt, &r->num_frames)) return e;
  if (auto e = read_seconds(form, r)) return e;
  if (auto e = read_int(form, "fps", 1, kMaxFps, &r->fps)) return e;
  if (auto e = read_int(form, "num_inference_steps", 1, 200, &r->num_inference_steps)) return e;
  if (auto e = read_number(form, "guidance_scale", 0.0, 20.0, &r->guidance_scale)) return e;
  if (auto e = read_number(form, "guidance_scale_2", 0.0, 20.0, &r->guidance_scale_2)) return e;
  if (auto e = read_number(form, "boundary_ratio", 0.0, 1.0, &r->boundary_ratio)) return e;
  if (auto e = read_number(form, "flow_shift", -HUGE_VAL, HUGE_VAL, &r->flow_shift)) return e;
  std::optional<int64_t> seed;
  if (auto e = read_int(form, "seed", -kMaxInt, kMaxInt, &seed)) return e;
  if (seed) {
    if (*seed < 0) return unprocessable_entity("'seed' must be non-negative.", "seed");
    r->seed = static_cast<uint64_t>(*seed);
  }
  if (auto e = read_int(form, "max_sequence_length", 1, kMaxInt, &r->max_sequence_length)) {
    return e;
  }
  if (auto e = read_image(form, r)) return e;

  for (const std::string& key : unsupported_fields()) {
    const std::optional<std::string> value = form.text(key);
    const httplib::MultipartFormData* part = form.file(key);
    if ((part && !part->filename.empty()) || (value && !value->empty())) {
      return bad_request("'" + key + "' is not supported by this server's video pipelines.", key);
    }
  }
  for (const std::string& key : unsupported_flags()) {
    bool on = false;
    if (auto e = read_flag(form, key, &on)) return e;
    if (on) {
      return bad_request("'" + key + "' is not supported by this server's video pipelines.", key);
    }
  }
  for (const std::string& name : form.names()) {
    if (!handled_fields().count(name) && !unsupported_fields().count(name) &&
        !unsupported_flags().count(name)) {
      r->ignored_fields.push_back(name);
    }
  }
  return std::nullopt;
}

}  // namespace qs::server
