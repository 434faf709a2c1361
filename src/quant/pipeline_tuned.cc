// quant: the block-by-block pass of the tuned modes (autoround.md §2; see pipeline.h). Two
// chains of activations run through the decoder: the full-precision chain (X_fp, the
// unquantized model's activations, whose block outputs are the tuning targets) and the
// quantized chain (X_q, the outputs of the blocks already quantized; enable_quanted_input=True,
// the tool's default), on which each block is tuned. Only three [n_samples, seqlen, hidden] f32
// buffers live at a time: X_fp, X_q and the current targets.
#include <chrono>
#include <cmath>
#include <optional>
#include <utility>

#include "formats/rtn.h"
#include "models/model.h"
#include "ops/elementwise.h"
#include "quant/block_tuner.h"
#include "quant/calibration.h"
#include "quant/linear_tuner.h"
#include "quant/opt_rtn.h"
#include "quant/pipeline.h"

namespace qs::quant {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// OPT-RTN of one block: the imatrix of each linear on the full-precision block's inputs
// (§1.5), then the weighted scale search; an MoE expert no calibration token reached has no
// imatrix and is plain RTN (listed in `unrouted`). The imatrix forward's output, the next
// block's input, goes to `next`. Losses are left unset. `act` is the forward's scratch, kept from
// block to block (block_imatrix).
Result<TuneResult> opt_rtn_block(const BlockTensors<float>& block,
                                 const PerLinear<formats::QuantScheme>& schemes,
                                 const BlockCalibration& calib, ThreadPool& pool, float* next,
                                 BlockActivations<float>& act) {
  QS_ASSIGN_OR_RETURN(auto imatrix, block_imatrix(block, calib, pool, next, &act));
  TuneResult out;
  out.weights.resize(block.n_linears());
  for (int j = 0; j < block.n_linears(); ++j) {
    const formats::QuantScheme& s = schemes[j];
    if (!s.quantized()) continue;
    const int64_t n = block.out_features(j), k = block.in_features(j);
    if (imatrix[j].empty()) out.unrouted.push_back(j);
    // The tool turns OPT-RTN off for 8-bit int (§1.5): those linears stay plain RTN.
    out.weights[j] =
        s.bits >= 8 || imatrix[j].empty()
            ? formats::rtn_quantize(block.w[j].data(), n, k, s.bits, s.group_size, s.sym)
            : opt_rtn(block.w[j].data(), n, k, s.bits, s.group_size, s.sym, imatrix[j].data(),
                      &pool);
  }
  return out;
}

// lm_head under --quant_lm_head, after every block (§1.4 item 11): its inputs are the final norm
// of each chain's last output, x_fp (the full-precision model's) and x_q (the quantized
// model's; OPT-RTN, which carries one chain, passes x_fp again), normalised in place.
// AutoRound tunes it as one linear; OPT-RTN searches its scales with the imatrix of x_q.
Result<BlockReport> quantize_head(const models::Model& model, const formats::QuantScheme& scheme,
                                  float* x_fp, float* x_q, const uint8_t* loss_mask, int64_t n,
                                  int64_t seqlen, const TuneOptions& t, ThreadPool& pool,
                                  const BlockReportFn& tune_progress,
                                  std::optional<formats::QuantizedWeight>* out) {
  const auto start = std::chrono::steady_clock::now();
  const models::ModelConfig& config = model.config();
  const int64_t hidden = config.hidden_size, tokens = n * seqlen;
  const float eps = static_cast<float>(config.rms_norm_eps);
  ops::rms_norm(x_fp, tokens, hidden, model.final_norm().data(), eps, x_fp);
  if (x_q != x_fp) ops::rms_norm(x_q, tokens, hidden, model.final_norm().data(), eps, x_q);
  const ops::LinearWeight& head = model.lm_head();
  if (head.quant != nullptr || head.dense.rank() != 2) {
    return invalid_argument("lm_head: expected a dense 2-D weight in the source checkpoint");
  }
  const std::vector<float> w = head.dense.to_f32();
  const int64_t vocab = head.rows(), k = head.cols();
  const LinearCalibration calib{x_q, x_fp, loss_mask, n, seqlen};
  BlockReport report;
  report.layer = "lm_head";
  report.index = report.total = config.n_layers;
  report.iters = t.iters;
  if (t.iters > 0) {
    auto on_iter = [&](int iter, double loss) {
      report.iter = iter;
      if (iter == 0) report.initial_loss = report.best_loss = loss;
      if (loss < report.best_loss) {
        report.best_loss = loss;
        report.best_iter = iter;
      }
      report.seconds = report.elapsed = seconds_since(start);
      report.eta = report.seconds / (iter + 1) * (t.iters - iter - 1);
      if (tune_progress) tune_progress(report);
    };
    QS_ASSIGN_OR_RETURN(LinearTuneResult r,
                        tune_linear(w.data(), vocab, k, scheme, calib, t, pool, on_iter));
    report.initial_loss = r.initial_loss;
    report.best_loss = r.best_loss;
    report.best_iter = r.best_iter;
    *out = std::move(r.weight);
  } else {
    const formats::QuantizedWeight rtn =
        formats::rtn_quantize(w.data(), vocab, k, scheme.bits, scheme.group_size, scheme.sym);
    if (scheme.bits >= 8) {
      *out = rtn;
    } else {
      std::vector<double> sums(k, 0.0);
      add_squares(x_q, tokens, k, nullptr, sums.data(), &pool);
      const std::vector<float> imatrix = imatrix_of(sums, n);
      *out = opt_rtn(w.data(), vocab, k, scheme.bits, scheme.group_size, scheme.sym, imatrix.data(),
                     &pool);
    }
    QS_ASSIGN_OR_RETURN(report.initial_loss, linear_loss(w.data(), vocab, k, &rtn, calib, pool));
    QS_ASSIGN_OR_RETURN(report.best_loss, linear_loss(w.data(), vocab, k, &**out, calib, pool));
  }
  report.iter = t.iters;
  report.done = true;
  report.seconds = report.elapsed = seconds_since(start);
  report.eta = 0;
  if (tune_progress) tune_progress(report);
  return report;
}

}  // namespace

Result<TunedModel> tune_model(const QuantizeOptions& o, const QuantPlan& plan,
                              const std::function<bool()>& cancelled,
                              const BlockReportFn& tune_progress) {
  const std::string dataset = o.dataset.empty() ? default_calibration_dataset() : o.dataset;
  CalibrationOptions c;
  c.nsamples = o.nsamples;
  c.seqlen = o.seqlen;
  c.seed = o.seed;
  // A pre-tokenized file is taken as it is; text is tokenized and sampled as the tool does.
  QS_ASSIGN_OR_RETURN(models::ModelConfig source_config, models::load_model_config(o.model_dir));
  QS_ASSIGN_OR_RETURN(std::optional<CalibrationSet> token_set,
                      read_token_calibration(dataset, c, source_config.vocab_size));
  CalibrationSet set;
  TunedModel result;
  if (token_set) {
    set = std::move(*token_set);
    result.calibration = std::to_string(set.samples.size()) + " samples x " +
                         std::to_string(o.seqlen) + " tokens, pre-tokenized, from " + dataset;
  } else {
    QS_ASSIGN_OR_RETURN(auto tokenizer, tok::load_tokenizer(o.model_dir));
    QS_ASSIGN_OR_RETURN(std::vector<std::string> docs, read_calibration_documents(dataset));
    QS_ASSIGN_OR_RETURN(set, sample_calibration(*tokenizer, docs, c, dataset));
    result.calibration = std::to_string(set.samples.size()) + " samples x " +
                         std::to_string(o.seqlen) + " tokens from " + dataset + " (" +
                         std::to_string(set.n_whole) + " whole documents, " +
                         std::to_string(set.n_concatenated) + " from concatenated ones)";
  }

  QS_ASSIGN_OR_RETURN(std::unique_ptr<models::Model> model, models::Model::load(o.model_dir));
  const models::ModelConfig& config = model->config();
  const int64_t n = static_cast<int64_t>(set.samples.size()), seqlen = o.seqlen;
  const int64_t hidden = config.hidden_size, per_sample = seqlen * hidden;
  // AutoRound carries two chains of activations, the full-precision one (its targets) and the
  // quantized one (its inputs, auto-round's enable_quanted_input); OPT-RTN carries the first
  // alone, as the tool does (enable_quanted_input is SignRound's setting, absent from its RTN
  // configs): each block's imatrix is taken on the full-precision block's own inputs.
  const bool tuning = o.iters > 0;
  std::vector<float> x_fp(n * per_sample), x_q, targets(n * per_sample);
  for (int64_t s = 0; s < n; ++s) {
    QS_RETURN_IF_ERROR(model->embed(set.samples[s], x_fp.data() + s * per_sample));
  }
  if (tuning) x_q = x_fp;  // block 0 sees the embeddings on both chains
  // Every sample is exactly seqlen real tokens (calibration.h), so attention needs no mask.
  // The loss drops each sample's last position, as the tool does since v0.15 (§1.4 item 4).
  std::vector<uint8_t> loss_mask(n * seqlen, 1);
  for (int64_t s = 0; s < n; ++s) loss_mask[s * seqlen + seqlen - 1] = 0;

  std::map<std::string, const LayerPlan*> by_module;
  for (const LayerPlan& l : plan.layers) by_module[l.module] = &l;
  ThreadPool pool(std::max(1, o.threads));
  TuneOptions t;
  t.iters = static_cast<int>(o.iters);
  t.lr = o.lr;
  t.minmax_lr = o.minmax_lr;
  t.batch_size = static_cast<int>(o.batch_size);
  t.gradient_accumulate_steps = static_cast<int>(o.gradient_accumulate_steps);
  t.seed = o.seed;
  t.products = o.amp ? ops::Products::kBf16 : ops::Products::kF32;

  const int64_t n_blocks = config.n_layers;
  auto head_plan = by_module.find("lm_head");
  const bool tune_head = head_plan != by_module.end() && head_plan->second->quantize;
  const auto tune_start = std::chrono::steady_clock::now();
  BlockActivations<float> imatrix_act;  // OPT-RTN's forward scratch, the same size every block
  for (int64_t i = 0; i < n_blocks; ++i) {
    if (cancelled && cancelled())
      return io_error("interrupted; " + o.output_dir + " left as it was");
    const auto block_start = std::chrono::steady_clock::now();
    QS_ASSIGN_OR_RETURN(BlockTensors<float> block, copy_block(model->layer(i), config, i));
    block.products = t.products;
    // Default kDense: kept in full precision.
    PerLinear<formats::QuantScheme> schemes = block.per_linear<formats::QuantScheme>();
    for (int j = 0; j < block.n_linears(); ++j) {
      const std::string& module = block.linears[j].name;
      auto it = by_module.find(module);
      if (it != by_module.end() && it->second->quantize)
        schemes[j] = plan.parsed.scheme_for(module);
    }
    BlockReport report;
    report.index = i;
    report.total = n_blocks;
    report.iters = t.iters;
    auto fill_times = [&](double fraction_of_block) {
      report.seconds = seconds_since(block_start);
      report.elapsed = seconds_since(tune_start);
      const double done = static_cast<double>(i) + fraction_of_block;
      report.eta = done > 0 ? report.elapsed / done * (static_cast<double>(n_blocks) - done) : 0;
    };
    TuneResult tuned;
    if (tuning) {
      // FP chain: the original block on the unquantized activations gives the targets.
      const auto fp_weights = block.per_linear<const formats::QuantizedWeight*>(nullptr);
      const BlockCalibration fp{x_fp.data(), nullptr, nullptr, loss_mask.data(), n, seqlen};
      QS_RETURN_IF_ERROR(block_output(block, fp_weights, fp, targets.data(), pool));
      const BlockCalibration calib{x_q.data(), targets.data(), nullptr, loss_mask.data(),
                                   n,          seqlen};
      double best = INFINITY;
      auto on_iter = [&](int iter, double loss) {
        if (iter == 0) report.initial_loss = loss;
        if (loss < best) {
          best = loss;
          report.best_loss = loss;
          report.best_iter = iter;
        }
        report.iter = iter;
        fill_times(static_cast<double>(iter + 1) / t.iters);
        if (tune_progress) tune_progress(report);
      };
      QS_ASSIGN_OR_RETURN(TuneResult r, tune_block(block, schemes, calib, t, pool, on_iter));
      report.initial_loss = r.initial_loss;
      report.best_loss = r.best_loss;
      report.best_iter = r.best_iter;
      tuned = std::move(r);
      // Quantized chain: this block with its quantized weights on its own inputs feeds the
      // next block. x_fp is free once the targets exist, so it takes the new X_q and the old
      // X_q's buffer becomes the next targets' scratch.
      auto q_weights = block.per_linear<const formats::QuantizedWeight*>(nullptr);
      for (int j = 0; j < block.n_linears(); ++j) {
        if (tuned.weights[j]) q_weights[j] = &*tuned.weights[j];
      }
      if (i + 1 < n_blocks || tune_head) {
        QS_RETURN_IF_ERROR(block_output(block, q_weights, calib, x_fp.data(), pool));
        std::swap(x_q, x_fp);      // x_q = Block_q(X_q)
        std::swap(x_fp, targets);  // x_fp = Y_fp; targets = scratch
      }
    } else {
      // One forward of the full-precision block collects the imatrix, and its output is the
      // next block's input. No loss is computed: it would cost a second forward (of the
      // quantized block) that the method itself does not need; the table shows "-".
      const BlockCalibration calib{x_fp.data(), nullptr, nullptr, loss_mask.data(), n, seqlen};
      QS_ASSIGN_OR_RETURN(tuned,
                          opt_rtn_block(block, schemes, calib, pool, targets.data(), imatrix_act));
      report.initial_loss = report.best_loss = NAN;
      std::swap(x_fp, targets);
    }
    for (int j : tuned.unrouted) result.unrouted.push_back(block.linears[j].name);
    for (int j = 0; j < block.n_linears(); ++j) {
      if (tuned.weights[j]) {
        result.weights.emplace(block.linears[j].name, std::move(*tuned.weights[j]));
      }
    }
    report.iter = t.iters;
    report.done = true;
    fill_times(1.0);
    if (tune_progress) tune_progress(report);
    result.blocks.push_back(report);
  }
  if (tune_head) {
    if (cancelled && cancelled())
      return io_error("interrupted; " + o.output_dir + " left as it was");
    // After the last block's swap x_q holds the quantized model's last output, x_fp the
    // full-precision one; OPT-RTN has only the latter, and takes the head's imatrix from it.
    std::optional<formats::QuantizedWeight> head;
    float* head_inputs = tuning ? x_q.data() : x_fp.data();
    QS_ASSIGN_OR_RETURN(
        BlockReport report,
        quantize_head(*model, plan.parsed.scheme_for("lm_head"), x_fp.data(), head_inputs,
                      loss_mask.data(), n, seqlen, t, pool, tune_progress, &head));
    result.weights.emplace("lm_head", std::move(*head));
    result.blocks.push_back(report);
  }
  return result;
}

}  // namespace qs::quant
