#pragma once
// Collectives over a RankView, at slice granularity so a Program can run them as tile tasks: each call
// handles elements [begin, end) of a float array that sits at the same window offset on every rank.
// Sums are f32 in rank order 0, 1, ..., R-1, so every rank gets bitwise the same result, and the one-shot
// and the two-phase all-reduce agree bit for bit.
//
// Buffer reuse: a rank may overwrite its input for epoch e + 1 only once every peer has read epoch e.
// Inside a Program the data flow guarantees it (docs/TENSOR_PARALLEL.md); a caller looping over epochs
// alternates between two buffers by epoch parity, as the tests do.
#include <cstdint>

#include "ops/host_device.h"
#include "transport/rank_view.h"

namespace tilefire {

// out[i] = sum over ranks r of input_r[i], for i in [begin, end): every rank reads every peer's slice
// (one shot: the least latency for small messages). `flag` is this slice's collective slot.
void allreduce_one_shot(const RankView& view, uint64_t input_offset, uint32_t begin, uint32_t end, uint32_t flag,
                        uint64_t epoch, float* out);

// The same sum in two phases for large messages: reduce-scatter (rank r sums its share of the slice into
// its window at `reduced_offset`), then all-gather (every rank copies every share). Each rank reads
// about 2 (R - 1) / R of the slice instead of R - 1 times it. Uses flags `flag` and `flag + 1`.
void allreduce_two_phase(const RankView& view, uint64_t input_offset, uint64_t reduced_offset, uint32_t begin,
                         uint32_t end, uint32_t flag, uint64_t epoch, float* out);

// Rank r's share of [begin, end) split as evenly as possible over R ranks: [*share_begin, *share_end).
// The device's all-gather tile splits the same way.
TILEFIRE_HD inline void rank_share(uint32_t begin, uint32_t end, uint32_t ranks, uint32_t rank, uint32_t* share_begin,
                                   uint32_t* share_end) {
  const uint32_t n = end - begin, base = n / ranks, extra = n % ranks;
  *share_begin = begin + rank * base + (rank < extra ? rank : extra);
  *share_end = *share_begin + base + (rank < extra ? 1 : 0);
}

// out[i] for i in [begin, end): element i of the owner's window array at `offset`, where rank r owns its
// share of [begin, end) (rank_share). Each rank publishes its own share, then copies every share.
void allgather(const RankView& view, uint64_t offset, uint32_t begin, uint32_t end, uint32_t flag, uint64_t epoch,
               float* out);

// This rank's share of the sum: out[i - share_begin] = sum over ranks of input_r[i], i in its share.
void reduce_scatter(const RankView& view, uint64_t input_offset, uint32_t begin, uint32_t end, uint32_t flag,
                    uint64_t epoch, float* out);

}  // namespace tilefire
