// quant: an output directory that appears complete or not at all. Everything is written into
// a staging directory beside the target (same parent, so the final rename stays on one
// filesystem and is atomic); commit() renames it into place, replacing an existing target
// only when asked to. Until commit() the destructor removes the staging directory, so an
// error, a full disk or an interrupted run leaves the target exactly as it was. (A SIGKILL
// can leave the hidden ".<name>.qs-staging-<pid>" directory behind; never a half target.)
#pragma once

#include <string>

#include "core/status.h"

namespace qs::quant {

class StagedOutput {
 public:
  // Fails when `target` exists and !overwrite, or the staging directory cannot be created
  // (read-only location, missing permissions); messages name the path and the OS error.
  static Result<StagedOutput> begin(const std::string& target, bool overwrite);
  StagedOutput(StagedOutput&& other) noexcept;
  StagedOutput& operator=(StagedOutput&&) = delete;
  StagedOutput(const StagedOutput&) = delete;
  ~StagedOutput();

  const std::string& dir() const { return staging_; }
  // Moves the staging directory to the target (the old target, if any, is moved aside first
  // and removed after).
  Status commit();

 private:
  StagedOutput(std::string target, std::string staging, bool overwrite)
      : target_(std::move(target)), staging_(std::move(staging)), overwrite_(overwrite) {}
  std::string target_;
  std::string staging_;  // "" once committed or moved from
  bool overwrite_ = false;
};

}  // namespace qs::quant
