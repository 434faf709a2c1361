// apps: `quantserve <command> [flags]` entry point and command table.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "apps/commands.h"

namespace {

struct Command {
  const char* name;
  int (*run)(const qs::apps::Args&);
  const char* help;
};

// One row per subcommand; a new command adds its row here and its declaration to commands.h.
const std::vector<Command> kCommands = {
    {"generate", qs::apps::cmd_generate, "complete one prompt, streamed to stdout"},
    {"generate-image", qs::apps::cmd_generate_image,
     "one FLUX.1 image from a diffusers pipeline directory, as PNG"},
    {"generate-video", qs::apps::cmd_generate_video,
     "one Wan2.2 video (text or image to video) from a diffusers pipeline directory, as MP4"},
    {"compare-images", qs::apps::cmd_compare_images,
     "same-seed PSNR/SSIM/latent cosine of two FLUX pipelines, JSON report and grid"},
    {"transcribe", qs::apps::cmd_transcribe,
     "speech to text with a Whisper checkpoint (text, json, verbose_json, srt, vtt)"},
    {"chat", qs::apps::cmd_chat, "interactive conversation in the model's chat template"},
    {"serve", qs::apps::cmd_serve, "OpenAI-compatible HTTP server (vLLM's endpoints and flags)"},
    {"worker", qs::apps::cmd_worker,
     "a tensor-parallel rank other than 0, beside `serve` under mpirun (serve on every rank "
     "does the same)"},
    {"inspect", qs::apps::cmd_inspect, "summarize a checkpoint directory (--json available)"},
    {"make-model", qs::apps::cmd_make_model,
     "write a random-weight checkpoint at a real model's shapes"},
    {"bench", qs::apps::cmd_bench,
     "benchmarks: `bench latency` (prefill/decode tokens/s, roofline), `bench serve` "
     "(vLLM's serving client), `bench throughput` (offline), `bench matrix` (scheme x KV memory "
     "over serve children)"},
    {"quantize", qs::apps::cmd_quantize,
     "quantize a checkpoint (auto-round flags; RTN with --iters 0 --disable_opt_rtn)"},
    {"eval", qs::apps::cmd_eval,
     "perplexity on held-out text; KL, top-1 agreement against a --reference"},
    {"import", qs::apps::cmd_import, "convert a llama2.c checkpoint into an HF directory"},
};

void usage(FILE* out) {
  std::fprintf(out, "usage: quantserve <command> [options]\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-15s %s\n", c.name, c.help);
  std::fprintf(out, "\n`quantserve <command> --help` describes a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    int rc = 0;
    try {
      rc = c.run(qs::apps::Args(argv + 2, argv + argc));
    } catch (const std::bad_alloc&) {
      // An allocation the system refused (a KV cache, a checkpoint or a batch too large for
      // the machine): a message and a failed exit instead of std::terminate's abort. Threads
      // other than the pool's (the server's engine loop) report their own.
      std::fprintf(stderr,
                   "quantserve %s: out of memory (an allocation was refused); lower the sizes "
                   "that grow memory (--max-model-len, --kv-cache-memory, --nsamples/--seqlen, "
                   "batch sizes) or free memory\n",
                   c.name);
      return 1;
    }
    // stdio reports a failed write to stdout (full disk, /dev/full, a closed pipe once
    // SIGPIPE is ignored) only through ferror or the final flush: either one fails the command.
    errno = 0;
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
      std::fprintf(stderr, "quantserve %s: cannot write to stdout: %s\n", c.name,
                   errno != 0 ? std::strerror(errno) : "write error");
      return rc != 0 ? rc : 1;
    }
    return rc;
  }
  std::fprintf(stderr, "quantserve: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
