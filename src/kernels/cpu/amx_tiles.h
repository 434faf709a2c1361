// kernels/cpu: the AMX tile configuration shared by the *_amx.cc kernels (included only from
// files compiled with the AMX flags).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace qs::kernels::cpu {

// The 64-byte operand of LDTILECFG, palette 1: per tile its rows and bytes per row.
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// GCC 12 does not see _tile_loadconfig read cfg and drops the stores that filled it (the CPU
// then faults on the first tile instruction); the empty asm makes them observable.
inline void load_tile_config(const TileConfig& cfg) {
  asm volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

}  // namespace qs::kernels::cpu
