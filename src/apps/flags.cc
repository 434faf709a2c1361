// apps: Flags implementation.
#include "apps/flags.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace qs::apps {

Flags& Flags::add(const std::string& name, const std::string& help, bool is_bool,
                  const std::string& default_value) {
  specs_[name] = Spec{help, is_bool, default_value};
  order_.push_back(name);
  return *this;
}

Status Flags::parse(const Args& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      help_ = true;
      continue;
    }
    if (a.rfind("--", 0) != 0 || a == "--") {
      positionals_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = specs_.find(name);
    if (it == specs_.end()) return invalid_argument("unknown flag --" + name);
    if (it->second.is_bool) {
      if (has_value && value != "true" && value != "false") {
        return invalid_argument("--" + name + " takes no value (or =true/=false)");
      }
      values_[name].push_back(has_value ? value : "true");
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) return invalid_argument("--" + name + " needs a value");
      value = args[++i];
    }
    values_[name].push_back(value);
  }
  return ok_status();
}

std::string Flags::usage(const std::string& command) const {
  std::string s = "usage: quantserve " + command + " [options]" +
                  (positional_name_.empty() ? "" : " " + positional_name_) + "\n\noptions:\n";
  for (const auto& name : order_) {
    const Spec& spec = specs_.at(name);
    std::string left = "  --" + name + (spec.is_bool ? "" : " VALUE");
    if (left.size() < 26) left.resize(26, ' ');
    s += left + " " + spec.help;
    if (!spec.default_value.empty()) s += " (default " + spec.default_value + ")";
    s += "\n";
  }
  return s;
}

bool Flags::has(const std::string& name) const {
  return values_.count(name) > 0;
}

std::string Flags::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it != values_.end()) return it->second.back();
  auto spec = specs_.find(name);
  return spec == specs_.end() ? "" : spec->second.default_value;
}

bool Flags::get_bool(const std::string& name) const {
  return get(name) == "true";
}

Result<int64_t> Flags::get_int(const std::string& name) const {
  const std::string v = get(name);
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0') {
    return invalid_argument("--" + name + " expects an integer, got '" + v + "'");
  }
  if (errno == ERANGE) {
    return out_of_range("--" + name + " is out of range: " + v + " does not fit in 64 bits");
  }
  return static_cast<int64_t>(x);
}

Result<double> Flags::get_double(const std::string& name) const {
  const std::string v = get(name);
  char* end = nullptr;
  errno = 0;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno != 0) {
    return invalid_argument("--" + name + " expects a number, got '" + v + "'");
  }
  return x;
}

Result<std::vector<std::string>> Flags::get_list(const std::string& name) const {
  const std::string s = get(name);
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) return invalid_argument("--" + name + " has an empty item: '" + s + "'");
    out.push_back(item);
  }
  if (out.empty()) return invalid_argument("--" + name + " is empty");
  return out;
}

std::vector<std::string> Flags::get_all(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

int run_command(const std::string& name, Flags& flags, const Args& args,
                const std::function<Status(const Flags&)>& check,
                const std::function<Status(const Flags&)>& run) {
  Status s = flags.parse(args);
  if (s.ok() && flags.help_requested()) {
    std::printf("%s", flags.usage(name).c_str());
    return 0;
  }
  if (s.ok() && !flags.positionals().empty() && !flags.accepts_positionals()) {
    s = invalid_argument("unexpected argument '" + flags.positionals()[0] + "'");
  }
  if (s.ok()) s = check(flags);
  if (!s.ok()) {
    std::fprintf(stderr, "quantserve %s: %s\n\n%s", name.c_str(), s.message().c_str(),
                 flags.usage(name).c_str());
    return 2;
  }
  if (s = run(flags); !s.ok()) {
    std::fprintf(stderr, "quantserve %s: %s\n", name.c_str(), s.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace qs::apps
