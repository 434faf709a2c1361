// fuzz: the helpers of fuzz_util.h.
#include "fuzz_util.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/check.h"

namespace qs::fuzz {

std::vector<std::string> split(const uint8_t* data, size_t size, size_t n) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  while (parts.size() + 1 < n) {
    const size_t at = rest.find(kSeparator);
    if (at == std::string_view::npos) break;
    parts.emplace_back(rest.substr(0, at));
    rest.remove_prefix(at + kSeparator.size());
  }
  parts.emplace_back(rest);
  parts.resize(n);
  return parts;
}

Scratch::Scratch() {
  const char* tmp = std::getenv("TMPDIR");
  dir_ = std::string(tmp && tmp[0] ? tmp : "/tmp") + "/qs_fuzz_" + std::to_string(getpid());
  reset();
}

void Scratch::reset() const {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
  std::filesystem::create_directories(dir_, ec);
  QS_CHECK_MSG(!ec, "cannot create the fuzz scratch directory");
}

std::string Scratch::write(const std::string& name, std::string_view bytes) const {
  const std::string path = dir_ + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  QS_CHECK_MSG(out.good(), "cannot write a fuzz scratch file");
  return path;
}

void exercise_tokenizer(const tok::Tokenizer& t, std::string_view text, std::string_view id_bytes) {
  const int32_t vocab = t.vocab_size();
  for (bool special : {false, true}) {
    const std::vector<int32_t> ids = t.encode(text, special);
    for (int32_t id : ids) QS_CHECK(id >= 0 && id < vocab);
    (void)t.decode(ids, false);
    (void)t.decode(ids, true);
  }
  if (vocab <= 0) return;
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < id_bytes.size(); i += 2) {
    const auto raw = static_cast<uint16_t>(static_cast<uint8_t>(id_bytes[i]) |
                                           static_cast<uint8_t>(id_bytes[i + 1]) << 8);
    ids.push_back(static_cast<int32_t>(raw % static_cast<uint32_t>(vocab)));
  }
  for (int32_t id : ids) {
    (void)t.token_bytes(id);
    (void)t.id_to_piece(id);
    (void)t.is_special(id);
  }
  (void)t.decode(ids, false);
  (void)t.decode(ids, true);
  (void)t.piece_to_id(text);
}

int run_tokenizer_dir(const uint8_t* data, size_t size, const std::vector<std::string>& files) {
  static const Scratch scratch;
  scratch.reset();
  const auto parts = split(data, size, files.size() + 2);
  for (size_t i = 0; i < files.size(); ++i) {
    if (!parts[i].empty()) scratch.write(files[i], parts[i]);
  }
  auto t = tok::load_tokenizer(scratch.dir());
  if (t.ok()) exercise_tokenizer(**t, parts[files.size()], parts[files.size() + 1]);
  return 0;
}

}  // namespace qs::fuzz
