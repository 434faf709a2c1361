// quant: staging directory renamed into place (see staged_output.h).
#include "quant/staged_output.h"

#include <unistd.h>

#include <filesystem>

namespace qs::quant {

namespace fs = std::filesystem;

Result<StagedOutput> StagedOutput::begin(const std::string& target, bool overwrite) {
  std::error_code ec;
  const fs::path t = fs::absolute(target, ec);
  if (ec) return io_error(target + ": " + ec.message());
  if (fs::exists(t, ec) && !overwrite) {
    return invalid_argument(target + " already exists; pass --overwrite to replace it");
  }
  if (fs::exists(t, ec) && !fs::is_directory(t, ec)) {
    return invalid_argument(target + " exists and is not a directory");
  }
  const fs::path parent = t.parent_path();
  fs::create_directories(parent, ec);
  if (ec) return io_error("cannot create " + parent.string() + ": " + ec.message());
  const fs::path staging =
      parent / ("." + t.filename().string() + ".qs-staging-" + std::to_string(getpid()));
  fs::remove_all(staging, ec);
  if (!fs::create_directory(staging, ec) || ec) {
    return io_error("cannot create the staging directory " + staging.string() + " beside " +
                    target + ": " + (ec ? ec.message() : std::string("already exists")));
  }
  return StagedOutput(t.string(), staging.string(), overwrite);
}

StagedOutput::StagedOutput(StagedOutput&& other) noexcept
    : target_(std::move(other.target_)),
      staging_(std::move(other.staging_)),
      overwrite_(other.overwrite_) {
  other.staging_.clear();
}

StagedOutput::~StagedOutput() {
  if (staging_.empty()) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

Status StagedOutput::commit() {
  std::error_code ec;
  fs::path old;
  if (fs::exists(target_, ec)) {
    if (!overwrite_) return invalid_argument(target_ + " appeared while quantizing; not replaced");
    old = target_ + ".qs-old-" + std::to_string(getpid());
    fs::remove_all(old, ec);
    fs::rename(target_, old, ec);
    if (ec) return io_error("cannot move the old " + target_ + " aside: " + ec.message());
  }
  fs::rename(staging_, target_, ec);
  if (ec) {
    std::error_code ignored;
    if (!old.empty()) fs::rename(old, target_, ignored);  // put the old output back
    return io_error("cannot rename " + staging_ + " to " + target_ + ": " + ec.message());
  }
  staging_.clear();
  if (!old.empty()) fs::remove_all(old, ec);
  return ok_status();
}

}  // namespace qs::quant
