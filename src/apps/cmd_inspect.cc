// apps: `quantserve inspect DIR [--json]`: what a checkpoint directory holds (architecture,
// hyper-parameters, tensors, dtypes, bytes), computed by io/checkpoint_summary.
#include <cstdio>

#include "apps/commands.h"
#include "apps/flags.h"
#include "io/checkpoint_summary.h"

namespace qs::apps {

int cmd_inspect(const Args& args) {
  Flags flags;
  flags.add("json", "print machine-readable JSON instead of text", /*is_bool=*/true);
  if (Status s = flags.parse(args); !s.ok()) {
    std::fprintf(stderr, "quantserve inspect: %s\n\n%s", s.message().c_str(),
                 flags.usage("inspect DIR").c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s", flags.usage("inspect DIR").c_str());
    return 0;
  }
  if (flags.positionals().size() != 1) {
    std::fprintf(stderr, "quantserve inspect: expected one checkpoint directory\n\n%s",
                 flags.usage("inspect DIR").c_str());
    return 2;
  }
  auto summary = io::summarize_checkpoint(flags.positionals()[0]);
  if (!summary.ok()) {
    std::fprintf(stderr, "quantserve inspect: %s\n", summary.status().message().c_str());
    return 1;
  }
  if (flags.get_bool("json")) {
    std::printf("%s\n", io::summary_to_json(*summary).dump(2).c_str());
  } else {
    std::printf("%s", io::summary_to_text(*summary).c_str());
  }
  return 0;
}

}  // namespace qs::apps
