// apps: command-line flags in the style users know from vLLM and llama.cpp:
// `--max-tokens 16` or `--max-tokens=16`, booleans as bare `--chat`. Unknown flags, missing
// values and unparsable numbers are errors that name the flag.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "core/status.h"

namespace qs::apps {

class Flags {
 public:
  // Declares a flag. `is_bool` flags take no value. Returns *this for chaining.
  Flags& add(const std::string& name, const std::string& help, bool is_bool = false,
             const std::string& default_value = "");
  // Lets run_command accept positional arguments (FILE...), named `name` in the usage line.
  Flags& takes_positionals(const std::string& name) {
    positional_name_ = name;
    return *this;
  }
  bool accepts_positionals() const { return !positional_name_.empty(); }
  // Parses args; positional arguments are kept in positionals().
  Status parse(const Args& args);

  bool help_requested() const { return help_; }
  std::string usage(const std::string& command) const;

  bool has(const std::string& name) const;
  std::string get(const std::string& name) const;
  bool get_bool(const std::string& name) const;
  Result<int64_t> get_int(const std::string& name) const;
  Result<double> get_double(const std::string& name) const;
  // A comma-separated value ("1,8,64") as its items; an empty list or item names the flag.
  Result<std::vector<std::string>> get_list(const std::string& name) const;
  // Every value of a flag given more than once (e.g. --stop).
  std::vector<std::string> get_all(const std::string& name) const;
  const std::vector<std::string>& positionals() const { return positionals_; }

 private:
  struct Spec {
    std::string help;
    bool is_bool = false;
    std::string default_value;
  };
  std::map<std::string, Spec> specs_;
  std::vector<std::string> order_;
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positionals_;
  std::string positional_name_;
  bool help_ = false;
};

// The life of a command: parse `args`; --help prints usage (exit 0); stray positional
// arguments and failures of `check` (malformed values, found before anything loads) are usage
// errors (exit 2, with usage); failures of `run` exit 1. Messages go to stderr as
// "quantserve <name>: ...".
int run_command(const std::string& name, Flags& flags, const Args& args,
                const std::function<Status(const Flags&)>& check,
                const std::function<Status(const Flags&)>& run);

}  // namespace qs::apps
