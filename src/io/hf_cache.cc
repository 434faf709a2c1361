// io: repo ids resolved in the Hugging Face hub cache (hf_cache.h). The lookup follows
// huggingface_hub's snapshot_download(local_files_only=True), which vLLM calls: a 40-hex
// revision is the snapshot's name, anything else is a file under refs/ holding the commit.
#include "io/hf_cache.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace qs::io {
namespace {

namespace fs = std::filesystem;

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

// $HOME, else the password database's entry, as os.path.expanduser falls back. The reentrant
// lookup, since Python callers may resolve names from several threads.
std::string home_dir() {
  if (std::string home = env_or_empty("HOME"); !home.empty()) return home;
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (getpwuid_r(getuid(), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr ||
      pw.pw_dir == nullptr) {
    return std::string();
  }
  return std::string(pw.pw_dir);
}

std::string expand_home(const std::string& path) {
  if (path == "~") return home_dir();
  if (path.rfind("~/", 0) == 0) return home_dir() + path.substr(1);
  return path;
}

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// One side of "owner/name": huggingface_hub's REPO_ID_REGEX puts \b at both ends of
// [\w\-.]+, so the part starts and ends with a word character.
bool repo_part_ok(const std::string& s, size_t max_len) {
  if (s.empty() || s.size() > max_len || !is_word_char(s.front()) || !is_word_char(s.back())) {
    return false;
  }
  for (char c : s) {
    if (!is_word_char(c) && c != '-' && c != '.') return false;
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

// A revision names a file under refs/ (branches like "main", tags, "refs/pr/1"): it must stay
// inside that folder.
bool revision_ok(const std::string& rev) {
  if (rev.empty() || rev.front() == '/') return false;
  for (const auto& part : fs::path(rev)) {
    if (part == ".." || part == ".") return false;
  }
  return true;
}

// The refs the repo folder holds, for an error that says which revisions are there.
std::string cached_refs(const fs::path& refs) {
  std::error_code ec;
  std::string names;
  for (auto it = fs::recursive_directory_iterator(refs, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    if (!names.empty()) names += ", ";
    names += fs::relative(it->path(), refs, ec).string();
  }
  return names.empty() ? "none" : names;
}

std::string download_hint(const std::string& name, const std::string& revision) {
  const std::string rev = revision.empty() ? "" : " --revision " + revision;
  return "quantserve does not download; fetch it with `hf download " + name + rev +
         "` (`huggingface-cli download " + name + rev + "` before huggingface_hub 1.0)";
}

}  // namespace

std::string hf_hub_cache_dir() {
  if (std::string v = env_or_empty("HF_HUB_CACHE"); !v.empty()) return expand_home(v);
  if (std::string v = env_or_empty("HUGGINGFACE_HUB_CACHE"); !v.empty()) return expand_home(v);
  if (std::string v = env_or_empty("HF_HOME"); !v.empty()) return expand_home(v) + "/hub";
  if (std::string v = env_or_empty("XDG_CACHE_HOME"); !v.empty()) {
    return expand_home(v) + "/huggingface/hub";
  }
  return home_dir() + "/.cache/huggingface/hub";
}

bool looks_like_repo_id(const std::string& name) {
  const size_t slash = name.find('/');
  if (slash == std::string::npos || name.find('/', slash + 1) != std::string::npos) return false;
  if (name.find("--") != std::string::npos || name.find("..") != std::string::npos ||
      name.ends_with(".git")) {
    return false;
  }
  // The owner has no length bound in the regex; the Hub caps names at 96.
  return repo_part_ok(name.substr(0, slash), name.size()) &&
         repo_part_ok(name.substr(slash + 1), 96);
}

Result<std::string> resolve_model_path(const std::string& name, const std::string& revision) {
  std::error_code ec;
  if (!name.empty() && fs::exists(name, ec)) return name;
  if (!looks_like_repo_id(name)) {
    return not_found("model '" + name +
                     "': no such file or directory, and not a Hugging Face repo id "
                     "(owner/name, e.g. Qwen/Qwen2.5-0.5B-Instruct) to look up in the cache");
  }
  const std::string rev = revision.empty() ? "main" : revision;
  if (!revision_ok(rev)) {
    return invalid_argument("--revision '" + rev +
                            "': not a branch, tag or commit (it must stay inside refs/)");
  }
  const std::string cache = hf_hub_cache_dir();
  std::string folder = name;
  folder.replace(folder.find('/'), 1, "--");
  const fs::path repo = fs::path(cache) / ("models--" + folder);
  const std::string what = "model '" + name + "': no local file or directory ./" + name + ", and ";
  if (!fs::is_directory(repo, ec)) {
    return not_found(what + "the repo is not in the Hugging Face cache (looked for " +
                     repo.string() +
                     "; the cache is $HF_HUB_CACHE, else $HF_HOME/hub, else "
                     "$XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub). " +
                     download_hint(name, revision));
  }
  std::string commit;
  const fs::path ref = repo / "refs" / rev;
  if (is_commit_hash(rev)) {
    commit = rev;
  } else if (fs::is_regular_file(ref, ec)) {
    std::ifstream in(ref);
    std::stringstream text;
    text << in.rdbuf();
    commit = text.str();
    // huggingface_hub writes the hash with no newline; a hand-edited file may have one.
    while (!commit.empty() && (commit.back() == '\n' || commit.back() == '\r' ||
                               commit.back() == ' ' || commit.back() == '\t')) {
      commit.pop_back();
    }
    if (!is_commit_hash(commit)) {
      return data_loss(what + "its ref file " + ref.string() + " holds '" + commit.substr(0, 64) +
                       "', not a 40-hex commit hash");
    }
  } else {
    return not_found(what + "revision \"" + rev +
                     "\" is not in the Hugging Face cache (no ref file " + ref.string() +
                     "; refs cached: " + cached_refs(repo / "refs") +
                     "; a commit is given as its 40-hex hash). " + download_hint(name, revision));
  }
  const fs::path snapshot = repo / "snapshots" / commit;
  if (!fs::is_directory(snapshot, ec)) {
    const std::string via = commit == rev ? "" : " (" + ref.string() + " names " + commit + ")";
    return not_found(what + "revision \"" + rev + "\" has no snapshot " + snapshot.string() + via +
                     " in the Hugging Face cache. " + download_hint(name, revision));
  }
  return snapshot.string();
}

Result<std::string> resolve_model_dir(const std::string& name, const std::string& revision) {
  QS_ASSIGN_OR_RETURN(std::string path, resolve_model_path(name, revision));
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    return invalid_argument("model '" + name + "': " + path +
                            " is a file; expected a model directory (config.json, weights, "
                            "tokenizer) or a Hugging Face repo id");
  }
  return path;
}

}  // namespace qs::io
