// core: where the data files that ship with quantserve (data/: the default calibration and
// evaluation text) are found at run time. A binary in the source tree reads the data/ folder
// whose path was compiled in; an installed Python package carries its own copy and points the
// environment variable QS_DATA_DIR at it, since the source tree is gone by then.
#pragma once

#include <cstdlib>
#include <string>

namespace qs {

// $QS_DATA_DIR when set and non-empty, else `compiled_in` (the source tree's data/).
inline std::string data_dir(const char* compiled_in) {
  const char* env = std::getenv("QS_DATA_DIR");
  return env != nullptr && env[0] != '\0' ? std::string(env) : std::string(compiled_in);
}

}  // namespace qs
