// apps: `quantserve import llama2c --checkpoint X.bin [--tokenizer tok.bin] --out DIR`:
// converts a foreign checkpoint into the HF directory layout every other command reads.
#include <cstdio>
#include <string>

#include "apps/commands.h"
#include "apps/flags.h"
#include "io/llama2c_import.h"
#include "tokenizer/llama2c_tokenizer.h"

namespace qs::apps {
namespace {

constexpr const char* kUsageName = "import llama2c";

Status import_llama2c(const Flags& flags) {
  const std::string out = flags.get("out");
  QS_RETURN_IF_ERROR(io::import_llama2c_weights(flags.get("checkpoint"), out));
  if (flags.has("tokenizer")) {
    QS_RETURN_IF_ERROR(tok::import_llama2c_tokenizer(flags.get("tokenizer"), out));
  }
  return ok_status();
}

}  // namespace

int cmd_import(const Args& args) {
  Flags flags;
  flags.add("checkpoint", "llama2.c legacy .bin weights (e.g. stories260K.bin)")
      .add("tokenizer", "llama2.c tokenizer .bin (e.g. tok512.bin); omitted: weights only")
      .add("out", "output directory (created if needed)");
  Status s = flags.parse(args);
  if (s.ok() && flags.help_requested()) {
    std::printf("%s", flags.usage(kUsageName).c_str());
    return 0;
  }
  if (s.ok() && (flags.positionals().size() != 1 || flags.positionals()[0] != "llama2c")) {
    s = invalid_argument("expected the source format 'llama2c' (the only one supported)");
  }
  if (s.ok() && (!flags.has("checkpoint") || !flags.has("out"))) {
    s = invalid_argument("--checkpoint and --out are required");
  }
  if (!s.ok()) {
    std::fprintf(stderr, "quantserve import: %s\n\n%s", s.message().c_str(),
                 flags.usage(kUsageName).c_str());
    return 2;
  }
  if (s = import_llama2c(flags); !s.ok()) {
    std::fprintf(stderr, "quantserve import: %s\n", s.message().c_str());
    return 1;
  }
  std::printf("imported %s into %s\n", flags.get("checkpoint").c_str(), flags.get("out").c_str());
  return 0;
}

}  // namespace qs::apps
