// apps: what `quantserve bench matrix` will run, checked before anything runs: the schemes
// (the reference, checkpoint directories, schemes to make from the reference), the KV-cache
// budgets and concurrencies, and how made schemes are made (make-model again from the
// reference's config.json, or RTN by `quantserve quantize`) and checked.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "apps/flags.h"
#include "core/status.h"
#include "io/quant_export.h"

namespace qs::apps::matrix {

inline constexpr const char* kFp8KvSuffix = "+fp8kv";
// argv[0] of a child that is this binary (shown as "quantserve").
inline constexpr const char* kSelf = "/proc/self/exe";
// What a --schemes entry may be.
extern const char* const kSchemeHelp;

// Where a scheme's checkpoint comes from.
enum class Source { kReference, kDirectory, kMake };
// How the made schemes are made from the reference.
enum class Maker { kMakeModel, kQuantize };

struct Scheme {
  std::string name;     // as given: "w4g128+fp8kv"
  std::string weights;  // "bf16", "w4g128", or the directory's name
  Source source = Source::kReference;
  std::string dir;  // the checkpoint served (kMake: where it is made)
  bool fp8_kv = false;
  io::IntQuantSpec spec;  // kMake only
};

struct Budget {
  std::string text;  // as given, passed to serve unchanged
  int64_t bytes = 0;
};

struct Plan {
  std::string model_dir;
  std::vector<Scheme> schemes;
  std::vector<Budget> budgets;
  std::vector<int64_t> concurrencies;
  Maker maker = Maker::kMakeModel;
  uint64_t make_seed = 0;
  std::string result_dir;
  std::string label;
};

// The whole invocation checked before anything runs: lists, spellings, directories, and
// whether each made scheme can be made from --model.
Result<Plan> make_plan(const Flags& flags);

// The command that makes scheme `s` (Source::kMake) at s.dir.
std::vector<std::string> make_argv(const Plan& p, const Scheme& s, const Flags& flags);

// Whether make-model with `seed` reproduced the reference: see the definition.
Status same_random_weights(const std::string& ref_dir, const std::string& made_dir, uint64_t seed);

// Everything of the reference that make-model does not write (tokenizer files, chat
// template), so the made checkpoint serves and tokenizes as the reference does.
Status copy_companion_files(const std::string& from, const std::string& to);

// argv as one shell line, kSelf shown as quantserve.
std::string shell_join(const std::vector<std::string>& argv);
// `s` with every character but [A-Za-z0-9._-] replaced by '_', for log file names.
std::string file_safe(const std::string& s);

}  // namespace qs::apps::matrix
