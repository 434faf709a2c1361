// python: SamplingParams to and from dicts (see sampling_dict.h).
#include "sampling_dict.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

namespace nb = nanobind;

namespace qs::py {
namespace {

// `fields[key]` as T; a missing key keeps `*out`.
template <typename T>
Status read(nb::dict fields, const char* key, T* out) {
  if (!fields.contains(key)) return ok_status();
  if (!nb::try_cast<T>(fields[key], *out)) {
    return invalid_argument(std::string(key) + " has the wrong type: " +
                            nb::cast<std::string>(nb::str(nb::handle(fields[key]).type())));
  }
  return ok_status();
}

}  // namespace

Result<SamplingParams> sampling_params_from_dict(nb::handle fields_handle) {
  if (!nb::isinstance<nb::dict>(fields_handle)) {
    return invalid_argument("sampling parameters must come as a dict");
  }
  nb::dict fields = nb::borrow<nb::dict>(fields_handle);
  SamplingParams p;
  QS_RETURN_IF_ERROR(read(fields, "temperature", &p.temperature));
  QS_RETURN_IF_ERROR(read(fields, "top_p", &p.top_p));
  QS_RETURN_IF_ERROR(read(fields, "top_k", &p.top_k));
  QS_RETURN_IF_ERROR(read(fields, "min_p", &p.min_p));
  QS_RETURN_IF_ERROR(read(fields, "repetition_penalty", &p.repetition_penalty));
  QS_RETURN_IF_ERROR(read(fields, "presence_penalty", &p.presence_penalty));
  QS_RETURN_IF_ERROR(read(fields, "frequency_penalty", &p.frequency_penalty));
  QS_RETURN_IF_ERROR(read(fields, "seed", &p.seed));
  QS_RETURN_IF_ERROR(read(fields, "max_tokens", &p.max_tokens));
  QS_RETURN_IF_ERROR(read(fields, "min_tokens", &p.min_tokens));
  QS_RETURN_IF_ERROR(read(fields, "stop", &p.stop));
  QS_RETURN_IF_ERROR(read(fields, "stop_token_ids", &p.stop_token_ids));
  QS_RETURN_IF_ERROR(read(fields, "ignore_eos", &p.ignore_eos));
  QS_RETURN_IF_ERROR(read(fields, "skip_special_tokens", &p.skip_special_tokens));
  QS_RETURN_IF_ERROR(read(fields, "include_stop_str_in_output", &p.include_stop_str_in_output));
  QS_RETURN_IF_ERROR(read(fields, "logprobs", &p.logprobs));
  return p;
}

}  // namespace qs::py
