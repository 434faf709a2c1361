// apps: the `quantserve bench` benchmarks beside `bench latency` (cmd_bench.cc dispatches):
// vLLM's serving client and offline throughput benchmark, the scheme x KV-memory matrix over
// serve children, plus the dataset flags and helpers they share (bench_dataset_flags.cc).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/flags.h"
#include "bench_client/dataset.h"
#include "tokenizer/tokenizer.h"

namespace qs::apps {

int bench_serve(const Args& args);       // cmd_bench_serve.cc
int bench_throughput(const Args& args);  // cmd_bench_throughput.cc
int bench_matrix(const Args& args);      // cmd_bench_matrix.cc

// vLLM's dataset flags (--dataset-name random|sharegpt, --dataset-path, --num-prompts,
// --random-*, --sharegpt-output-len, --input-len/--output-len aliases, --seed,
// --no-oversample).
void add_dataset_flags(Flags& flags);
// The requests those flags describe, lengths counted with `tokenizer`.
Result<std::vector<bench::SampleRequest>> load_dataset(const Flags& flags,
                                                       const tok::Tokenizer& tokenizer);
// --tokenizer, else the first of `model_dirs` that is a directory (our tokenizer loader reads
// directories): the model path, or what the server says it loaded.
Result<std::unique_ptr<tok::Tokenizer>> load_bench_tokenizer(
    const Flags& flags, const std::vector<std::string>& model_dirs, std::string* tokenizer_id);

// Local time as 20261202-171500: result file and directory names, the JSON's "date".
std::string now_stamp();

}  // namespace qs::apps
