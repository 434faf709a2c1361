// core: memory for data that stays resident and is streamed again and again, as repacked
// weights are (decode reads every one of them once per token). It is carved out of 2 MiB-
// aligned chunks advised as transparent huge pages: with 4 KiB pages the TLB misses of a
// streaming read cost a third of the bandwidth on the dev machine (17 vs 27 GB/s for the int4
// GEMV), and small matrices (a k_proj is ~60 KB) must share chunks rather than each waste a
// huge page. A chunk is freed when the last allocation in it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace qs {

// `bytes` bytes, 64-byte aligned, uninitialized; nullptr if the system has no memory left.
// Thread-safe.
std::shared_ptr<uint8_t[]> alloc_resident(size_t bytes);

}  // namespace qs
