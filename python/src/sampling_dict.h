// python: quantserve.SamplingParams (a Python class, quantserve/sampling_params.py) reaches the
// engine as a dict of the engine's own fields, already checked for type and range there; this
// reads it into the engine's SamplingParams, naming the key of any value of the wrong type.
#pragma once

#include <nanobind/nanobind.h>

#include "core/status.h"
#include "engine/sampler.h"

namespace qs::py {

Result<SamplingParams> sampling_params_from_dict(nanobind::handle fields);

}  // namespace qs::py
