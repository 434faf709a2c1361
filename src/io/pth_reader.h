// io: reads a PyTorch state_dict saved by torch.save (the zip format of torch >= 1.6): the
// pickle in <name>/data.pkl, interpreted by a small stack machine that knows only what a
// state_dict uses (OrderedDict, _rebuild_tensor_v2, typed storages), and each storage's bytes
// in <name>/data/<key>. Nothing is executed: any other global or opcode is an error naming it.
// Tensors come back as owning, contiguous copies.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace qs::io {

// (name, tensor) in the order the state_dict lists them. F32, F16 and BF16 storages; tensors
// must be contiguous (row-major strides); zip entries must be stored, not compressed.
Result<std::vector<std::pair<std::string, Tensor>>> read_pth_state_dict(const std::string& path);

}  // namespace qs::io
