// models: placeholder expansion (see placeholders.h).
#include "models/placeholders.h"

#include <deque>
#include <map>
#include <string>

namespace qs::models {

Result<std::vector<MultimodalItem>> expand_placeholders(std::vector<int32_t>* ids,
                                                        std::span<const PlaceholderKind> kinds,
                                                        std::vector<PlaceholderItem> items) {
  std::map<int32_t, std::deque<PlaceholderItem*>> queues;
  for (const PlaceholderKind& k : kinds) {
    if (k.token_id >= 0) queues[k.token_id];
  }
  size_t extra = 0;
  for (PlaceholderItem& p : items) {
    auto q = queues.find(p.token_id);
    if (q == queues.end() || p.n_tokens < 1 ||
        (!p.tokens.empty() && (p.lead < 0 || p.lead >= static_cast<int64_t>(p.tokens.size())))) {
      return invalid_argument("an item without a placeholder token of the model's");
    }
    q->second.push_back(&p);
    extra += p.tokens.empty() ? static_cast<size_t>(p.n_tokens) : p.tokens.size();
  }
  for (const PlaceholderKind& k : kinds) {
    if (k.token_id < 0) continue;
    size_t found = 0;
    for (const int32_t t : *ids) found += t == k.token_id ? 1 : 0;
    const size_t wanted = queues[k.token_id].size();
    if (found != wanted) {
      return invalid_argument("the prompt has " + std::to_string(found) + " " + k.what +
                              " placeholder(s) for " + std::to_string(wanted) + " " + k.what +
                              "(s)");
    }
  }
  std::vector<MultimodalItem> out_items;
  if (items.empty()) return out_items;
  std::vector<int32_t> out;
  out.reserve(ids->size() + extra);
  for (const int32_t id : *ids) {
    auto q = queues.find(id);
    if (q == queues.end() || q->second.empty()) {
      out.push_back(id);
      continue;
    }
    PlaceholderItem& p = *q->second.front();
    q->second.pop_front();
    p.item.offset = static_cast<int64_t>(out.size()) + (p.tokens.empty() ? 0 : p.lead);
    out_items.push_back(std::move(p.item));
    if (p.tokens.empty()) {
      out.insert(out.end(), static_cast<size_t>(p.n_tokens), id);
    } else {
      out.insert(out.end(), p.tokens.begin(), p.tokens.end());
    }
  }
  *ids = std::move(out);
  return out_items;
}

}  // namespace qs::models
