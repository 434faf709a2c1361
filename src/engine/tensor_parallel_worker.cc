// engine: the tensor-parallel step plan and worker loop (see tensor_parallel_worker.h).
#include "engine/tensor_parallel_worker.h"

#include <cstring>
#include <memory>
#include <string>

#include "core/log.h"

namespace qs::engine {
namespace {

// The plan's messages: one byte of kind, then its fields in native byte order (every rank of a
// group runs the same binary; Open MPI across hosts of one architecture).
enum class Kind : uint8_t { kCache = 1, kBatch = 2, kStop = 3, kPing = 4 };

class Writer {
 public:
  explicit Writer(Kind kind) { bytes_.push_back(static_cast<uint8_t>(kind)); }
  template <class T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  template <class T>
  void put_array(const T* data, size_t n) {
    put<uint64_t>(n);
    const auto* p = reinterpret_cast<const uint8_t*>(data);
    bytes_.insert(bytes_.end(), p, p + n * sizeof(T));
  }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// Reads what Writer wrote; a short or malformed message is an internal error (the sender is
// the same program), never a read past the end.
class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}
  template <class T>
  Status get(T* v) {
    if (pos_ + sizeof(T) > bytes_.size()) return short_message();
    std::memcpy(v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return ok_status();
  }
  template <class T>
  Status get_array(std::vector<T>* v) {
    uint64_t n = 0;
    QS_RETURN_IF_ERROR(get(&n));
    if (n > (bytes_.size() - pos_) / sizeof(T)) return short_message();
    v->resize(n);
    if (n > 0) std::memcpy(v->data(), bytes_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return ok_status();
  }

 private:
  Status short_message() const {
    return internal_error("tensor parallel: a step message of " + std::to_string(bytes_.size()) +
                          " bytes ended early");
  }
  const std::vector<uint8_t>& bytes_;
  size_t pos_ = 1;  // after the kind
};

// A batch as the worker rebuilds it, owning what ForwardBatch only points at.
struct ReceivedBatch {
  models::ForwardBatch batch;
  std::vector<std::vector<int32_t>> tables;
  std::vector<std::vector<float>> embeddings;
};

Status read_batch(const std::vector<uint8_t>& bytes, ReceivedBatch* out) {
  Reader in(bytes);
  models::ForwardBatch& b = out->batch;
  QS_RETURN_IF_ERROR(in.get_array(&b.token_ids));
  uint64_t n_seqs = 0;
  QS_RETURN_IF_ERROR(in.get(&n_seqs));
  if (n_seqs > bytes.size()) return internal_error("tensor parallel: a malformed batch");
  b.seqs.resize(n_seqs);
  out->tables.resize(n_seqs);
  for (uint64_t i = 0; i < n_seqs; ++i) {
    ops::AttentionSeq& s = b.seqs[i];
    QS_RETURN_IF_ERROR(in.get(&s.query_start));
    QS_RETURN_IF_ERROR(in.get(&s.n_query));
    QS_RETURN_IF_ERROR(in.get(&s.start_pos));
    QS_RETURN_IF_ERROR(in.get_array(&out->tables[i]));
    s.block_table = out->tables[i];
  }
  uint8_t all_logits = 0;
  QS_RETURN_IF_ERROR(in.get(&all_logits));
  b.all_logits = all_logits != 0;
  uint64_t n_spans = 0;
  QS_RETURN_IF_ERROR(in.get(&n_spans));
  if (n_spans > bytes.size()) return internal_error("tensor parallel: a malformed batch");
  b.embeddings.resize(n_spans);
  out->embeddings.resize(n_spans);
  for (uint64_t i = 0; i < n_spans; ++i) {
    QS_RETURN_IF_ERROR(in.get(&b.embeddings[i].row));
    QS_RETURN_IF_ERROR(in.get(&b.embeddings[i].count));
    QS_RETURN_IF_ERROR(in.get_array(&out->embeddings[i]));
    b.embeddings[i].data = out->embeddings[i].data();
  }
  return in.get_array(&b.mrope_positions);
}

}  // namespace

Status send_cache(dist::Communicator& comm, const KvCacheConfig& config) {
  Writer out(Kind::kCache);
  out.put(config.n_blocks);
  out.put(config.block_size);
  out.put(static_cast<int32_t>(config.dtype));
  out.put_array(config.k_scales.data(), config.k_scales.size());
  out.put_array(config.v_scales.data(), config.v_scales.size());
  return comm.broadcast_bytes(&out.bytes(), 0);
}

Status send_batch(dist::Communicator& comm, const models::ForwardBatch& batch, int64_t hidden) {
  Writer out(Kind::kBatch);
  out.put_array(batch.token_ids.data(), batch.token_ids.size());
  out.put<uint64_t>(batch.seqs.size());
  for (const ops::AttentionSeq& s : batch.seqs) {
    out.put(s.query_start);
    out.put(s.n_query);
    out.put(s.start_pos);
    out.put_array(s.block_table.data(), s.block_table.size());
  }
  out.put<uint8_t>(batch.all_logits ? 1 : 0);
  out.put<uint64_t>(batch.embeddings.size());
  // The placeholders' rows come from encoders that run on rank 0 only; their outputs travel.
  for (const models::ForwardBatch::EmbeddingSpan& e : batch.embeddings) {
    out.put(e.row);
    out.put(e.count);
    out.put_array(e.data, static_cast<size_t>(e.count * hidden));
  }
  out.put_array(batch.mrope_positions.data(), batch.mrope_positions.size());
  return comm.broadcast_bytes(&out.bytes(), 0);
}

Status ping(dist::Communicator& comm) {
  Writer out(Kind::kPing);
  QS_RETURN_IF_ERROR(comm.broadcast_bytes(&out.bytes(), 0));
  return comm.barrier();
}

Status send_stop(dist::Communicator& comm) {
  Writer out(Kind::kStop);
  return comm.broadcast_bytes(&out.bytes(), 0);
}

Result<WorkerStats> run_tensor_parallel_worker(const models::Model& model, ThreadPool& pool) {
  dist::Communicator* comm = model.tensor_parallel();
  if (comm == nullptr || comm->rank() == 0) {
    return invalid_argument("tensor parallel worker: the model is not split, or this is rank 0");
  }
  const models::ModelConfig& lc = model.local_config();
  std::unique_ptr<KvCache> cache;
  WorkerStats stats;
  std::vector<uint8_t> message;
  std::vector<float> logits;
  for (;;) {
    // Rank 0 may sit idle for as long as it likes between steps: a wait with no limit (a dead
    // rank 0 ends the whole job through mpirun).
    QS_RETURN_IF_ERROR(comm->wait_broadcast_bytes(&message, 0, 0));
    if (message.empty()) return internal_error("tensor parallel worker: an empty step message");
    const auto kind = static_cast<Kind>(message[0]);
    if (kind == Kind::kStop) return stats;
    if (kind == Kind::kPing) {
      QS_RETURN_IF_ERROR(comm->barrier());
      continue;
    }
    if (kind == Kind::kCache) {
      KvCacheConfig kv;
      kv.n_layers = lc.n_layers;
      kv.n_kv_heads = lc.n_kv_heads;
      kv.head_dim = lc.head_dim;
      Reader in(message);
      int32_t dtype = 0;
      QS_RETURN_IF_ERROR(in.get(&kv.n_blocks));
      QS_RETURN_IF_ERROR(in.get(&kv.block_size));
      QS_RETURN_IF_ERROR(in.get(&dtype));
      QS_RETURN_IF_ERROR(in.get_array(&kv.k_scales));
      QS_RETURN_IF_ERROR(in.get_array(&kv.v_scales));
      kv.dtype = static_cast<DType>(dtype);
      cache.reset();  // the last engine's cache goes first
      cache = std::make_unique<KvCache>(kv, model.backend());
      QS_LOG_INFO(
          "tensor parallel rank %d of %d: KV cache shard of %lld blocks x %lld tokens "
          "(%.1f MiB)",
          comm->rank(), comm->size(), static_cast<long long>(kv.n_blocks),
          static_cast<long long>(kv.block_size),
          static_cast<double>(cache->size_bytes()) / (1 << 20));
      continue;
    }
    if (kind != Kind::kBatch || cache == nullptr) {
      return internal_error("tensor parallel worker: an unexpected step message");
    }
    ReceivedBatch received;
    QS_RETURN_IF_ERROR(read_batch(message, &received));
    ++stats.steps;
    Status s = model.forward(received.batch, cache->layers(), pool, &logits);
    if (!s.ok()) {
      // A batch rank 0 refuses too (it checks before the first collective): the same error
      // there ends the request. A broken group ends this loop.
      if (s.code() == StatusCode::kUnavailable) return s;
      ++stats.failed_steps;
    }
  }
}

}  // namespace qs::engine
