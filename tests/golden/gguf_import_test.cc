// golden: `quantserve import gguf` on real files. stories260K.gguf (llama.cpp's conversion of
// Karpathy's model) imports to the very tensors, token ids and greedy story of the shipped
// models/stories260K; the vocab-only GGUFs of llama.cpp's tokenizer tests import to
// tokenizers that reproduce llama.cpp's fixtures (ids made by HF tokenizers); SmolLM2's
// imported tokenizer matches HF `tokenizers` on the same tokenizer.json (when fetched by
// scripts/fetch_smollm2.sh). Tests skip, naming the file, when ../shared/data is absent.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "../common/engine_runner.h"
#include "importers/gguf_import.h"
#include "importers/gguf_tokenizer.h"
#include "io/checkpoint.h"
#include "io/gguf.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace qs {
namespace {

namespace fs = std::filesystem;

const std::string kData = QS_SHARED_DATA_DIR;
const std::string kStoriesGguf = kData + "/models/stories260K.gguf";
const std::string kStoriesHf = std::string(QS_SOURCE_DIR) + "/models/stories260K";

#define QS_SKIP_IF_MISSING(path) \
  if (!fs::exists(path)) GTEST_SKIP() << "missing " << (path)

fs::path temp_dir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("qs_gguf_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  return d;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string greedy(const std::string& dir, int n_tokens) {
  auto model = models::Model::load(dir);
  auto tokenizer = tok::load_tokenizer(dir);
  EXPECT_TRUE(model.ok() && tokenizer.ok());
  if (!model.ok() || !tokenizer.ok()) return "";
  ThreadPool pool(1);
  engine::EngineConfig config;
  config.max_model_len = n_tokens + 16;
  auto engine = qs::testing::make_engine(**model, tokenizer->get(), {(*tokenizer)->eos_id()}, pool,
                                         /*cache_tokens=*/n_tokens + 32, config);
  if (engine == nullptr) return "";
  EXPECT_TRUE(engine
                  ->add_request(qs::testing::greedy_request(
                      "story", (*tokenizer)->encode("", /*add_special_tokens=*/true), n_tokens))
                  .ok());
  auto done = qs::testing::run_to_completion(*engine);
  EXPECT_TRUE(done["story"].error.ok()) << done["story"].error.to_string();
  return done["story"].text;
}

TEST(GgufImport, Stories260KMatchesTheShippedCheckpoint) {
  QS_SKIP_IF_MISSING(kStoriesGguf);
  auto gguf = io::GgufFile::open(kStoriesGguf);
  ASSERT_TRUE(gguf.ok()) << gguf.status().to_string();
  EXPECT_EQ(gguf->version(), 3u);
  EXPECT_EQ(gguf->tensors().size(), 48u);
  const fs::path out = temp_dir("stories");
  ASSERT_TRUE(importers::import_gguf_weights(*gguf, out.string(), DType::kF32).ok());
  ASSERT_TRUE(importers::import_gguf_tokenizer(*gguf, out.string()).ok());

  // Every tensor of the shipped HF checkpoint (made from the llama2.c .bin) is bit-identical;
  // the GGUF also stores output.weight, a copy of the embedding.
  auto ours = io::Checkpoint::open(out.string());
  auto shipped = io::Checkpoint::open(kStoriesHf);
  ASSERT_TRUE(ours.ok() && shipped.ok());
  for (const std::string& name : shipped->names()) {
    auto a = ours->get(name);
    auto b = shipped->get(name);
    ASSERT_TRUE(a.ok()) << name;
    ASSERT_EQ(a->shape, b->shape) << name;
    EXPECT_EQ(a->to_f32(), b->to_f32()) << name;
  }
  EXPECT_EQ(ours->get("lm_head.weight")->to_f32(),
            shipped->get("model.embed_tokens.weight")->to_f32());

  auto t_ours = tok::load_tokenizer(out.string());
  auto t_shipped = tok::load_tokenizer(kStoriesHf);
  ASSERT_TRUE(t_ours.ok()) << t_ours.status().to_string();
  for (const char* text : {"Once upon a time, there was a little girl named Lily.",
                           "  two spaces\nand a newline", "Zoë's café: 42!"}) {
    EXPECT_EQ((*t_ours)->encode(text, true), (*t_shipped)->encode(text, true)) << text;
  }
  const std::string story = greedy(out.string(), 200);
  EXPECT_EQ(story, greedy(kStoriesHf, 200));
  EXPECT_EQ(story.rfind("Once upon a time", 0), 0u) << story;
  fs::remove_all(out);
}

// llama.cpp's tokenizer fixtures: cases separated by "\n__ggml_vocab_test__\n", one line of
// ids per case.
void expect_vocab_fixtures(const std::string& stem) {
  const std::string base = kData + "/tokenizers/llama.cpp-vocab/" + stem;
  auto gguf = io::GgufFile::open(base);
  ASSERT_TRUE(gguf.ok()) << gguf.status().to_string();
  const fs::path out = temp_dir("vocab");
  // Vocabulary-only files have no weights to import: an error naming why, nothing written.
  Status weights = importers::import_gguf_weights(*gguf, out.string(), DType::kBF16);
  EXPECT_FALSE(weights.ok());
  EXPECT_TRUE(weights.message().find("only 'llama'") != std::string::npos ||
              weights.message().find("no tensor 'token_embd.weight'") != std::string::npos)
      << weights.message();
  EXPECT_FALSE(fs::exists(out / "model.safetensors"));
  ASSERT_TRUE(importers::import_gguf_tokenizer(*gguf, out.string()).ok());
  auto tok = tok::load_tokenizer(out.string());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const std::string inp = slurp(base + ".inp");
  std::istringstream outs(slurp(base + ".out"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  size_t pos = 0;
  int n_cases = 0, matched = 0;
  for (size_t end; (end = inp.find(sep, pos)) != std::string::npos; pos = end + sep.size()) {
    const std::string text = inp.substr(pos, end - pos);
    std::string line;
    std::getline(outs, line);
    std::istringstream ids(line);
    std::vector<int32_t> expected;
    for (int32_t id; ids >> id;) expected.push_back(id);
    const std::vector<int32_t> got = (*tok)->encode(text, /*add_special_tokens=*/false);
    EXPECT_EQ(got, expected) << stem << ": \"" << text << "\"";
    matched += got == expected;
    ++n_cases;
  }
  EXPECT_GE(n_cases, 46);
  EXPECT_EQ(matched, n_cases);
  fs::remove_all(out);
}

TEST(GgufImport, Gpt2VocabReproducesLlamaCppFixtures) {
  QS_SKIP_IF_MISSING(kData + "/tokenizers/llama.cpp-vocab/ggml-vocab-gpt-2.gguf");
  expect_vocab_fixtures("ggml-vocab-gpt-2.gguf");
}

TEST(GgufImport, LlamaSpmVocabReproducesLlamaCppFixtures) {
  QS_SKIP_IF_MISSING(kData + "/tokenizers/llama.cpp-vocab/ggml-vocab-llama-spm.gguf");
  expect_vocab_fixtures("ggml-vocab-llama-spm.gguf");
}

// The SmolLM2 GGUF is 98 MB and lives outside the repository; scripts/fetch_smollm2.sh puts
// its import in $QS_CACHE/smollm2/hf (default ~/.cache/quantserve).
TEST(GgufImport, SmolLM2TokenizerMatchesHfTokenizers) {
  const char* cache = std::getenv("QS_CACHE");
  const char* home = std::getenv("HOME");
  const fs::path dir =
      fs::path(cache ? cache : std::string(home ? home : "/") + "/.cache/quantserve") / "smollm2" /
      "hf";
  QS_SKIP_IF_MISSING((dir / "tokenizer.json").string());
  auto tok = tok::load_tokenizer(dir.string());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->bos_id(), 1);  // <|im_start|>, as SmolLM2-Instruct's config says
  EXPECT_EQ((*tok)->eos_id(), 2);  // <|im_end|>
  const auto j = nlohmann::json::parse(
      slurp(std::string(QS_SOURCE_DIR) + "/tests/golden/fixtures/gguf/smollm2_tokens.json"));
  ASSERT_EQ(j["cases"].size(), 10u);
  for (const auto& c : j["cases"]) {
    const std::string text = c["text"];
    const std::vector<int32_t> ids = (*tok)->encode(text, /*add_special_tokens=*/false);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << text;
    EXPECT_EQ((*tok)->decode(ids, false), text);
  }
}

}  // namespace
}  // namespace qs
