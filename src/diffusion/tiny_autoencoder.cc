// diffusion: TAEF2 (see tiny_autoencoder.h). The layer lists mirror taesd.py's Encoder and
// Decoder nn.Sequential (their indices are the state_dict's prefixes).
#include "diffusion/tiny_autoencoder.h"

#include <cmath>
#include <map>

#include "io/pth_reader.h"
#include "ops/activation.h"
#include "ops/conv.h"

namespace qs::diffusion {

namespace {

using Layer = TinyAutoencoder::Layer;
using Conv = TinyAutoencoder::Conv;
using Block = TinyAutoencoder::Block;

class StateDict {
 public:
  static Result<StateDict> open(const std::string& path) {
    StateDict s;
    s.path_ = path;
    QS_ASSIGN_OR_RETURN(auto tensors, io::read_pth_state_dict(path));
    for (auto& [name, t] : tensors) s.t_[name] = t;
    return s;
  }
  bool has(const std::string& name) const { return t_.count(name) > 0; }
  Result<std::vector<float>> get(const std::string& name, const std::vector<int64_t>& shape) const {
    auto it = t_.find(name);
    if (it == t_.end()) return not_found(path_ + ": tensor '" + name + "' not found");
    if (it->second.shape != shape) {
      return invalid_argument(path_ + ": tensor '" + name + "' has shape " +
                              shape_string(it->second.shape) + ", expected " + shape_string(shape));
    }
    return it->second.to_f32();
  }
  Result<Conv> conv(const std::string& p, int64_t c_in, int64_t c_out, int64_t k, bool bias,
                    int64_t stride = 1) const {
    Conv c;
    c.c_in = c_in, c.c_out = c_out, c.k = k, c.stride = stride;
    QS_ASSIGN_OR_RETURN(c.w, get(p + ".weight", {c_out, c_in, k, k}));
    if (bias) {
      QS_ASSIGN_OR_RETURN(c.b, get(p + ".bias", {c_out}));
    }
    return c;
  }
  Result<Block> block(const std::string& p, bool pool) const {
    Block b;
    QS_ASSIGN_OR_RETURN(b.c0, conv(p + ".conv.0", 64, 64, 3, true));
    QS_ASSIGN_OR_RETURN(b.c1, conv(p + ".conv.2", 64, 64, 3, true));
    QS_ASSIGN_OR_RETURN(b.c2, conv(p + ".conv.4", 64, 64, 3, true));
    b.has_pool = pool;
    if (pool) {
      QS_ASSIGN_OR_RETURN(b.pool_in, conv(p + ".pool.0", 64, 256, 1, false));
      QS_ASSIGN_OR_RETURN(b.gn_w, get(p + ".pool.1.weight", {256}));
      QS_ASSIGN_OR_RETURN(b.gn_b, get(p + ".pool.1.bias", {256}));
      QS_ASSIGN_OR_RETURN(b.pool_out, conv(p + ".pool.3", 256, 64, 1, false));
    }
    return b;
  }
  size_t size() const { return t_.size(); }

 private:
  std::string path_;
  std::map<std::string, Tensor> t_;
};

struct Img {
  std::vector<float> d;
  int64_t n, c, h, w;
};

Status run_conv(const Conv& cv, const Img& x, Img* y, ThreadPool& pool) {
  const int64_t pad = cv.k / 2;
  ops::Conv2dShape s{x.n, x.c, x.h, x.w, cv.c_out, cv.k, cv.k, cv.stride, pad, pad, pad, pad};
  *y = Img{std::vector<float>(static_cast<size_t>(x.n * cv.c_out * s.out_h() * s.out_w())), x.n,
           cv.c_out, s.out_h(), s.out_w()};
  return ops::conv2d(x.d.data(), s, cv.w.data(), cv.b.empty() ? nullptr : cv.b.data(), y->d.data(),
                     pool);
}

// Block: (x + pool(x) when present), then relu(conv(x) + x) (n_in == n_out: identity skip).
Status run_block(const Block& b, Img* x, ThreadPool& pool) {
  Img t, u;
  if (b.has_pool) {
    QS_RETURN_IF_ERROR(run_conv(b.pool_in, *x, &t, pool));
    // nn.GroupNorm(4, 256): PyTorch's default eps 1e-5.
    ops::group_norm(t.d.data(), t.n, t.c, t.h * t.w, 4, b.gn_w.data(), b.gn_b.data(), 1e-5f,
                    t.d.data());
    ops::relu(t.d.data(), static_cast<int64_t>(t.d.size()));
    QS_RETURN_IF_ERROR(run_conv(b.pool_out, t, &u, pool));
    for (size_t i = 0; i < x->d.size(); ++i) x->d[i] += u.d[i];
  }
  QS_RETURN_IF_ERROR(run_conv(b.c0, *x, &t, pool));
  ops::relu(t.d.data(), static_cast<int64_t>(t.d.size()));
  QS_RETURN_IF_ERROR(run_conv(b.c1, t, &u, pool));
  ops::relu(u.d.data(), static_cast<int64_t>(u.d.size()));
  QS_RETURN_IF_ERROR(run_conv(b.c2, u, &t, pool));
  for (size_t i = 0; i < x->d.size(); ++i) x->d[i] += t.d[i];
  ops::relu(x->d.data(), static_cast<int64_t>(x->d.size()));
  return ok_status();
}

Status run_layers(const std::vector<Layer>& layers, Img* x, ThreadPool& pool) {
  Img t;
  for (const Layer& l : layers) {
    switch (l.kind) {
      case Layer::kConv:
        QS_RETURN_IF_ERROR(run_conv(l.conv, *x, &t, pool));
        *x = std::move(t);
        break;
      case Layer::kBlock:
        QS_RETURN_IF_ERROR(run_block(l.block, x, pool));
        break;
      case Layer::kUpsample:
        t = Img{std::vector<float>(x->d.size() * 4), x->n, x->c, 2 * x->h, 2 * x->w};
        ops::upsample_nearest2x(x->d.data(), x->n, x->c, x->h, x->w, t.d.data());
        *x = std::move(t);
        break;
      case Layer::kRelu:
        ops::relu(x->d.data(), static_cast<int64_t>(x->d.size()));
        break;
      case Layer::kClamp:  // Clamp(): tanh(x / 3) * 3
        for (float& v : x->d) v = std::tanh(v / 3.0f) * 3.0f;
        break;
    }
  }
  return ok_status();
}

Layer conv_layer(Conv c) {
  Layer l{Layer::kConv, std::move(c), {}};
  return l;
}
Layer block_layer(Block b) {
  Layer l{Layer::kBlock, {}, std::move(b)};
  return l;
}
Layer plain(Layer::Kind k) {
  return Layer{k, {}, {}};
}

}  // namespace

Result<TinyAutoencoder> TinyAutoencoder::load(const std::string& encoder_pth,
                                              const std::string& decoder_pth) {
  TinyAutoencoder m;
  QS_ASSIGN_OR_RETURN(StateDict dec, StateDict::open(decoder_pth));
  // The latent width is the input width of the decoder's first convolution.
  if (!dec.has("1.weight")) return data_loss(decoder_pth + ": no '1.weight' (not a TAESD decoder)");
  // TAEF2's decoder has the midblock GroupNorm branch in its first three blocks.
  const bool gn = dec.has("3.pool.0.weight");
  for (int64_t L : {4, 16, 32}) {
    if (dec.get("1.weight", {64, L, 3, 3}).ok()) m.latent_channels_ = L;
  }
  if (m.latent_channels_ == 0) return data_loss(decoder_pth + ": '1.weight' is not [64, L, 3, 3]");
  const int64_t L = m.latent_channels_;
  // Decoder: Clamp, conv(L, 64), ReLU, 3 blocks (GN), up, conv, 3 blocks, up, conv, 3 blocks,
  // up, conv, block, conv(64, 3).
  m.decoder_.push_back(plain(Layer::kClamp));
  QS_ASSIGN_OR_RETURN(Conv c, dec.conv("1", L, 64, 3, true));
  m.decoder_.push_back(conv_layer(std::move(c)));
  m.decoder_.push_back(plain(Layer::kRelu));
  int idx = 3;
  for (int stage = 0; stage < 3; ++stage) {
    for (int k = 0; k < 3; ++k, ++idx) {
      QS_ASSIGN_OR_RETURN(Block b, dec.block(std::to_string(idx), gn && stage == 0));
      m.decoder_.push_back(block_layer(std::move(b)));
    }
    m.decoder_.push_back(plain(Layer::kUpsample));
    ++idx;
    QS_ASSIGN_OR_RETURN(Conv up, dec.conv(std::to_string(idx++), 64, 64, 3, false));
    m.decoder_.push_back(conv_layer(std::move(up)));
  }
  QS_ASSIGN_OR_RETURN(Block last, dec.block(std::to_string(idx++), false));
  m.decoder_.push_back(block_layer(std::move(last)));
  QS_ASSIGN_OR_RETURN(Conv out, dec.conv(std::to_string(idx++), 64, 3, 3, true));
  m.decoder_.push_back(conv_layer(std::move(out)));
  if (dec.has(std::to_string(idx) + ".weight")) {
    return data_loss(decoder_pth + ": more layers than a TAESD decoder has");
  }
  if (encoder_pth.empty()) return m;

  // Encoder: conv(3, 64), block, then 3 x (stride-2 conv, 3 blocks; GN in the last three),
  // conv(64, L).
  QS_ASSIGN_OR_RETURN(StateDict enc, StateDict::open(encoder_pth));
  QS_ASSIGN_OR_RETURN(Conv first, enc.conv("0", 3, 64, 3, true));
  m.encoder_.push_back(conv_layer(std::move(first)));
  QS_ASSIGN_OR_RETURN(Block b1, enc.block("1", false));
  m.encoder_.push_back(block_layer(std::move(b1)));
  idx = 2;
  for (int stage = 0; stage < 3; ++stage) {
    QS_ASSIGN_OR_RETURN(Conv down, enc.conv(std::to_string(idx++), 64, 64, 3, false, 2));
    m.encoder_.push_back(conv_layer(std::move(down)));
    for (int k = 0; k < 3; ++k, ++idx) {
      QS_ASSIGN_OR_RETURN(Block b, enc.block(std::to_string(idx), gn && stage == 2));
      m.encoder_.push_back(block_layer(std::move(b)));
    }
  }
  QS_ASSIGN_OR_RETURN(Conv enc_out, enc.conv(std::to_string(idx), 64, L, 3, true));
  m.encoder_.push_back(conv_layer(std::move(enc_out)));
  return m;
}

Status TinyAutoencoder::encode(const float* image, int64_t n, int64_t h, int64_t w,
                               std::vector<float>* latents, ThreadPool& pool) const {
  if (encoder_.empty()) return unimplemented("tiny autoencoder: no encoder loaded");
  if (n <= 0 || h <= 0 || w <= 0 || h % kScale != 0 || w % kScale != 0 || h > 16384 || w > 16384) {
    return invalid_argument("tiny autoencoder: the image size must be a positive multiple of 8");
  }
  Img x{std::vector<float>(image, image + n * 3 * h * w), n, 3, h, w};
  QS_RETURN_IF_ERROR(run_layers(encoder_, &x, pool));
  *latents = std::move(x.d);
  return ok_status();
}

Status TinyAutoencoder::decode(const float* latents, int64_t n, int64_t h, int64_t w,
                               std::vector<float>* image, ThreadPool& pool) const {
  if (n <= 0 || h <= 0 || w <= 0 || h > 2048 || w > 2048) {
    return invalid_argument("tiny autoencoder: bad latent size");
  }
  Img x{std::vector<float>(latents, latents + n * latent_channels_ * h * w), n, latent_channels_, h,
        w};
  QS_RETURN_IF_ERROR(run_layers(decoder_, &x, pool));
  *image = std::move(x.d);
  return ok_status();
}

}  // namespace qs::diffusion
