// apps: the subcommands of the `quantserve` binary. Each lives in its own cmd_*.cc and is
// listed once in main.cc. A command gets argv after its name and returns the exit code.
#pragma once

#include <string>
#include <vector>

namespace qs::apps {

using Args = std::vector<std::string>;

int cmd_generate(const Args& args);        // cmd_generate.cc
int cmd_generate_image(const Args& args);  // cmd_generate_image.cc
int cmd_generate_video(const Args& args);  // cmd_generate_video.cc
int cmd_compare_images(const Args& args);  // cmd_compare_images.cc
int cmd_import(const Args& args);          // cmd_import.cc
int cmd_inspect(const Args& args);         // cmd_inspect.cc
int cmd_make_model(const Args& args);      // cmd_make_model.cc
int cmd_bench(const Args& args);           // cmd_bench.cc
int cmd_chat(const Args& args);            // cmd_chat.cc
int cmd_eval(const Args& args);            // cmd_eval.cc
int cmd_quantize(const Args& args);        // cmd_quantize.cc
int cmd_serve(const Args& args);           // cmd_serve.cc
int cmd_transcribe(const Args& args);      // cmd_transcribe.cc
int cmd_worker(const Args& args);          // tensor_parallel.cc

}  // namespace qs::apps
