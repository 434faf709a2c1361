// io: repo ids resolved in the Hugging Face hub cache (hf_cache.h).
#include "io/hf_cache.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace qs::io {
namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

bool repo_part_ok(const std::string& s) {
  if (s.empty() || s.size() > 96 || s[0] == '.' || s.find("..") != std::string::npos) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

bool is_commit_hash(const std::string& s) {
  if (s.size() != 40) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

std::string hf_hub_cache_dir() {
  if (std::string v = env("HF_HUB_CACHE"); !v.empty()) return v;
  if (std::string v = env("HF_HOME"); !v.empty()) return v + "/hub";
  if (std::string v = env("XDG_CACHE_HOME"); !v.empty()) return v + "/huggingface/hub";
  return env("HOME") + "/.cache/huggingface/hub";
}

bool looks_like_repo_id(const std::string& name) {
  const size_t slash = name.find('/');
  if (slash == std::string::npos || name.find('/', slash + 1) != std::string::npos) return false;
  return repo_part_ok(name.substr(0, slash)) && repo_part_ok(name.substr(slash + 1));
}

Result<std::string> resolve_model_dir(const std::string& name, const std::string& revision) {
  std::error_code ec;
  if (fs::is_directory(name, ec)) return name;
  if (!looks_like_repo_id(name)) {
    return not_found(name +
                     ": no such directory (and not a Hugging Face repo id such as "
                     "\"Qwen/Qwen2.5-0.5B-Instruct\")");
  }
  const std::string cache = hf_hub_cache_dir();
  std::string folder = name;
  folder.replace(folder.find('/'), 1, "--");
  const fs::path repo = fs::path(cache) / ("models--" + folder);
  const std::string rev = revision.empty() ? "main" : revision;
  const std::string where = name + ": not a local directory, and not in the Hugging Face cache";
  if (!fs::is_directory(repo, ec)) {
    return not_found(where + " (looked for " + repo.string() +
                     "; the cache is $HF_HUB_CACHE, else $HF_HOME/hub, else "
                     "~/.cache/huggingface/hub; quantserve does not download)");
  }
  std::string commit;
  const fs::path ref = repo / "refs" / rev;
  if (fs::is_regular_file(ref, ec)) {
    std::ifstream in(ref);
    std::getline(in, commit);
    while (!commit.empty() &&
           (commit.back() == '\n' || commit.back() == '\r' || commit.back() == ' ')) {
      commit.pop_back();
    }
  } else if (is_commit_hash(rev)) {
    commit = rev;
  } else {
    return not_found(where + " at revision \"" + rev + "\" (no " + ref.string() + ")");
  }
  const fs::path snapshot = repo / "snapshots" / commit;
  if (!is_commit_hash(commit) || !fs::is_directory(snapshot, ec)) {
    return not_found(where + " at revision \"" + rev + "\" (no snapshot " + snapshot.string() +
                     ")");
  }
  return snapshot.string();
}

}  // namespace qs::io
