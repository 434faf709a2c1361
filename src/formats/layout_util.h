// formats (internal): what the layout files share. The entries of the formats table, and
// scalar helpers to read and write packed int32 words and scale tensors of a stored layout.
// Reads go through memcpy because a tensor of an mmapped safetensors file need not be aligned
// to its element size. Not for use outside src/formats.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "formats/layouts.h"

namespace qs::formats {

// The table entries, one per file (gptq.cc, awq.cc, compressed_tensors.cc, fp8.cc).
const LayoutDef& gptq_layout_def();
const LayoutDef& awq_layout_def();
const LayoutDef& ct_packed_layout_def();
const LayoutDef& ct_int_layout_def();
const LayoutDef& fp8_layout_def();

// Element i of a tensor of int32 words (dtype checked by check_stored), as unsigned bits.
// Inline: unpack calls it once per stored word.
inline uint32_t load_word(const Tensor& t, int64_t i) {
  uint32_t v;
  std::memcpy(&v, static_cast<const char*>(t.data) + i * 4, 4);
  return v;
}
inline void store_word(const Tensor& t, int64_t i, uint32_t v) {
  std::memcpy(t.mutable_ptr<char>() + i * 4, &v, 4);
}
// Element i of an I8/I16/I32/I64 tensor (QS_CHECK on any other dtype).
int64_t load_int(const Tensor& t, int64_t i);
// Element i of an F32/F16/BF16 tensor as f32, and the converse (rounding to the dtype).
float load_float(const Tensor& t, int64_t i);
void store_float(const Tensor& t, int64_t i, float v);

// Bit streams: value j of a `bits`-wide sequence sits at bit bits*j of consecutive words, LSB
// first, and may straddle two words (GPTQ's 3-bit layout: 32 values in 3 words). For bits
// 2, 4, 8 this is the plain "32/bits values per word" packing.
void unpack_stream(const uint32_t* words, int64_t count, int bits, uint8_t* out);
// ORs into `words` (zeroed by the caller, ceil(count*bits/32) of them).
void pack_stream(const uint8_t* values, int64_t count, int bits, uint32_t* words);
// Word-aligned packing (compressed-tensors pack_to_int32): floor(32/bits) values per word,
// value j in word j/(32/bits) at bit bits*(j%(32/bits)); for 3 bits, 10 values and 2 spare
// bits per word. Same as the stream for bits 2, 4, 8.
void unpack_aligned(const uint32_t* words, int64_t count, int bits, uint8_t* out);
void pack_aligned(const uint8_t* values, int64_t count, int bits, uint32_t* words);
inline int64_t aligned_words(int64_t count, int bits) {
  const int64_t per_word = 32 / bits;
  return (count + per_word - 1) / per_word;
}

// Gathers the words t[first + i*stride], i < count (a column of a row-major word matrix).
std::vector<uint32_t> gather_words(const Tensor& t, int64_t first, int64_t stride, int64_t count);
void scatter_words(const std::vector<uint32_t>& words, const Tensor& t, int64_t first,
                   int64_t stride);

// Checks what every pack() needs before encoding: w.validate(), w.bits == scheme.bits, the
// group size the scheme implies for k (`group`), the code type, and that each scale is exact in
// w.scale_dtype (a packer that rounded scales would store a weight other than `w`). `what` names
// the layout in messages.
Status check_packable(const QuantScheme& scheme, const QuantizedWeight& w, int64_t group,
                      CodeType code_type, const char* what);
// The g_idx is empty or k / group_size everywhere (layouts that cannot store one accept it).
bool trivial_g_idx(const QuantizedWeight& w);
// The dtypes a stored scale may have: F16, BF16, F32.
const std::vector<DType>& scale_dtypes();
int64_t ceil_div(int64_t a, int64_t b);

}  // namespace qs::formats
