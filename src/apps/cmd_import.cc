// apps: `quantserve import llama2c --checkpoint X.bin [--tokenizer tok.bin] --out DIR`,
// `quantserve import gguf --gguf FILE --out DIR [--dtype bf16|f32]` and `quantserve import ct2
// --model DIR --out DIR [--dtype f16|bf16|f32]`: convert a foreign checkpoint into the HF
// directory layout every other command reads.
#include <cstdio>
#include <optional>
#include <string>

#include "apps/commands.h"
#include "apps/flags.h"
#include "importers/ct2_whisper_import.h"
#include "importers/gguf_import.h"
#include "importers/gguf_tokenizer.h"
#include "importers/llama2c_import.h"
#include "importers/llama2c_tokenizer.h"

namespace qs::apps {
namespace {

constexpr const char* kUsageName = "import llama2c|gguf|ct2";

Status import_llama2c(const Flags& flags) {
  if (!flags.has("checkpoint") || !flags.has("out")) {
    return invalid_argument("--checkpoint and --out are required");
  }
  const std::string out = flags.get("out");
  QS_RETURN_IF_ERROR(importers::import_llama2c_weights(flags.get("checkpoint"), out));
  if (flags.has("tokenizer")) {
    QS_RETURN_IF_ERROR(importers::import_llama2c_tokenizer(flags.get("tokenizer"), out));
  }
  return ok_status();
}

// gguf writes bf16 unless told; ct2 keeps what model.bin stores, so the flag has no one default.
std::string gguf_dtype(const Flags& flags) {
  return flags.has("dtype") ? flags.get("dtype") : "bf16";
}

Status import_gguf(const Flags& flags) {
  QS_ASSIGN_OR_RETURN(io::GgufFile gguf, io::GgufFile::open(flags.get("gguf")));
  const std::string dtype = gguf_dtype(flags);
  QS_RETURN_IF_ERROR(importers::import_gguf_weights(gguf, flags.get("out"),
                                                    dtype == "f32" ? DType::kF32 : DType::kBF16));
  return importers::import_gguf_tokenizer(gguf, flags.get("out"));
}

Status import_ct2(const Flags& flags) {
  std::optional<DType> dtype;
  if (flags.has("dtype")) {
    const std::string d = flags.get("dtype");
    dtype = d == "f32" ? DType::kF32 : d == "f16" ? DType::kF16 : DType::kBF16;
  }
  return importers::import_ct2_whisper(flags.get("model"), flags.get("out"), dtype);
}

// Flag problems found before anything is read: usage errors (exit 2).
Status check(const Flags& flags) {
  if (flags.positionals().size() != 1) {
    return invalid_argument("expected the source format: 'llama2c', 'gguf' or 'ct2'");
  }
  const std::string& format = flags.positionals()[0];
  if (format == "llama2c") {
    if (!flags.has("checkpoint") || !flags.has("out")) {
      return invalid_argument("--checkpoint and --out are required");
    }
    return ok_status();
  }
  if (format == "ct2") {
    if (!flags.has("model") || !flags.has("out")) {
      return invalid_argument("--model and --out are required");
    }
    const std::string d = flags.get("dtype");
    if (flags.has("dtype") && d != "f16" && d != "bf16" && d != "f32") {
      return invalid_argument("--dtype must be f16, bf16 or f32, got '" + d + "'");
    }
    return ok_status();
  }
  if (format != "gguf") {
    return invalid_argument("unknown source format '" + format +
                            "' (llama2c, gguf and ct2 are known)");
  }
  if (!flags.has("gguf") || !flags.has("out"))
    return invalid_argument("--gguf and --out are required");
  if (gguf_dtype(flags) != "bf16" && gguf_dtype(flags) != "f32") {
    return invalid_argument("--dtype must be bf16 or f32, got '" + gguf_dtype(flags) + "'");
  }
  return ok_status();
}

}  // namespace

int cmd_import(const Args& args) {
  Flags flags;
  flags.add("checkpoint", "llama2c: legacy .bin weights (e.g. stories260K.bin)")
      .add("tokenizer", "llama2c: tokenizer .bin (e.g. tok512.bin); omitted: weights only")
      .add("gguf", "gguf: a Llama-architecture .gguf (F32/F16/BF16/Q4_0/Q4_1/Q8_0/Q4_K/Q6_K)")
      .add("model", "ct2: a CTranslate2 Whisper folder (model.bin, config.json, tokenizer.json)")
      .add("dtype",
           "dtype of the written weights; gguf: bf16 or f32 (default bf16); ct2: f16, bf16 or "
           "f32 (default: as model.bin stores them)")
      .add("out", "output directory (created if needed)");
  Status s = flags.parse(args);
  if (s.ok() && flags.help_requested()) {
    std::printf("%s", flags.usage(kUsageName).c_str());
    return 0;
  }
  if (s.ok()) s = check(flags);
  if (!s.ok()) {
    std::fprintf(stderr, "quantserve import: %s\n\n%s", s.message().c_str(),
                 flags.usage(kUsageName).c_str());
    return 2;
  }
  const std::string& format = flags.positionals()[0];
  const char* source = format == "gguf" ? "gguf" : format == "ct2" ? "model" : "checkpoint";
  s = format == "gguf"  ? import_gguf(flags)
      : format == "ct2" ? import_ct2(flags)
                        : import_llama2c(flags);
  if (!s.ok()) {
    std::fprintf(stderr, "quantserve import: %s\n", s.message().c_str());
    return 1;
  }
  std::printf("imported %s into %s\n", flags.get(source).c_str(), flags.get("out").c_str());
  return 0;
}

}  // namespace qs::apps
