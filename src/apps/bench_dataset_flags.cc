// apps: dataset flags and helpers shared by the bench commands (see bench_commands.h).
#include <ctime>
#include <filesystem>

#include "apps/bench_commands.h"

namespace qs::apps {

void add_dataset_flags(Flags& flags) {
  flags.add("dataset-name", "random | sharegpt", false, "random")
      .add("dataset-path", "ShareGPT JSON file (sharegpt only)")
      .add("num-prompts", "number of requests", false, "1000")
      .add("random-input-len", "random: prompt tokens", false, "1024")
      .add("random-output-len", "random: output tokens (max_tokens)", false, "128")
      .add("random-range-ratio", "random: lengths uniform in [L(1-r), L(1+r)]", false, "0.0")
      .add("random-prefix-len", "random: tokens of a prefix shared by every prompt", false, "0")
      .add("sharegpt-output-len", "sharegpt: fixed output length instead of the reply's")
      .add("input-len", "alias: sets --random-input-len")
      .add("output-len", "alias: sets --random-output-len and --sharegpt-output-len")
      .add("seed", "seed of dataset sampling and arrival times", false, "0")
      .add("no-oversample", "sharegpt: do not repeat requests when too few pass the filter", true);
}

Result<std::vector<bench::SampleRequest>> load_dataset(const Flags& flags,
                                                       const tok::Tokenizer& tokenizer) {
  QS_ASSIGN_OR_RETURN(int64_t num_prompts, flags.get_int("num-prompts"));
  QS_ASSIGN_OR_RETURN(int64_t seed, flags.get_int("seed"));
  if (num_prompts < 1) return invalid_argument("--num-prompts must be at least 1");
  const std::string name = flags.get("dataset-name");
  if (name == "random") {
    if (flags.has("dataset-path")) {
      return invalid_argument("the random dataset takes no --dataset-path (use sharegpt)");
    }
    bench::RandomOptions o;
    o.num_prompts = num_prompts;
    o.seed = static_cast<uint64_t>(seed);
    const std::string in_flag = flags.has("input-len") ? "input-len" : "random-input-len";
    const std::string out_flag = flags.has("output-len") ? "output-len" : "random-output-len";
    QS_ASSIGN_OR_RETURN(o.input_len, flags.get_int(in_flag));
    QS_ASSIGN_OR_RETURN(o.output_len, flags.get_int(out_flag));
    QS_ASSIGN_OR_RETURN(o.range_ratio, flags.get_double("random-range-ratio"));
    QS_ASSIGN_OR_RETURN(o.prefix_len, flags.get_int("random-prefix-len"));
    return bench::sample_random(tokenizer, o);
  }
  if (name == "sharegpt") {
    if (!flags.has("dataset-path")) return invalid_argument("sharegpt needs --dataset-path FILE");
    bench::ShareGptOptions o;
    o.num_prompts = num_prompts;
    o.seed = static_cast<uint64_t>(seed);
    o.oversample = !flags.get_bool("no-oversample");
    const std::string out_flag = flags.has("output-len") ? "output-len" : "sharegpt-output-len";
    if (flags.has(out_flag)) {
      QS_ASSIGN_OR_RETURN(int64_t len, flags.get_int(out_flag));
      o.output_len = len;
    }
    QS_ASSIGN_OR_RETURN(auto convs, bench::read_sharegpt(flags.get("dataset-path")));
    auto count = [&](const std::string& text) {
      return static_cast<int64_t>(tokenizer.encode(text, /*add_special_tokens=*/true).size());
    };
    std::vector<bench::SampleRequest> out = bench::sample_sharegpt(std::move(convs), count, o);
    if (out.empty()) {
      return invalid_argument(flags.get("dataset-path") +
                              ": no conversation passes vLLM's ShareGPT filter");
    }
    return out;
  }
  return invalid_argument("--dataset-name must be random or sharegpt, got '" + name + "'");
}

Result<std::unique_ptr<tok::Tokenizer>> load_bench_tokenizer(
    const Flags& flags, const std::vector<std::string>& model_dirs, std::string* tokenizer_id) {
  std::string dir = flags.get("tokenizer");
  for (const std::string& d : model_dirs) {
    if (dir.empty() && !d.empty() && std::filesystem::is_directory(d)) dir = d;
  }
  if (dir.empty()) {
    std::string names;
    for (const std::string& d : model_dirs) names += (names.empty() ? "'" : ", '") + d + "'";
    return invalid_argument(
        "--tokenizer DIR is needed (no directory to load a tokenizer from "
        "among " +
        names + ")");
  }
  *tokenizer_id = dir;
  return tok::load_tokenizer(dir);
}

std::string now_stamp() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return buf;
}

}  // namespace qs::apps
