// core: the checks behind limits.h.
#include "core/limits.h"

#include "core/tensor.h"

namespace qs::limits {

Status check_at_most(int64_t value, int64_t limit, const std::string& what) {
  if (value <= limit) return ok_status();
  return out_of_range(what + " is " + std::to_string(value) + ", above the limit of " +
                      std::to_string(limit));
}

Result<int64_t> checked_numel(const std::vector<int64_t>& shape, const std::string& what) {
  if (static_cast<int64_t>(shape.size()) > kMaxRank) {
    return out_of_range(what + ": rank " + std::to_string(shape.size()) +
                        " is above the limit of " + std::to_string(kMaxRank));
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return invalid_argument(what + ": shape " + shape_string(shape) + " is negative");
  }
  for (int64_t d : shape) {
    // Once a zero is seen the product stays zero, but every later dimension must still fit.
    if (d > kMaxNumel || (n != 0 && d != 0 && n > kMaxNumel / d)) {
      return out_of_range(what + ": shape " + shape_string(shape) + " has more than 2^40 elements");
    }
    n *= d;
  }
  return n;
}

}  // namespace qs::limits
