// The cost model (scheduler/cost_model.h).
#include "scheduler/cost_model.h"

#include <algorithm>

#include "ops/all_ops.h"

namespace tilefire {

namespace {

// Activation bytes of the regions a tile reads and writes: columns x tokens x 4 for activations and
// windows, positions x head_dim x 4 for KV-cache heads (up to `context`).
double region_bytes(const Program& program, const std::vector<Region>& regions, uint32_t tokens, double context,
                    uint32_t head_dim) {
  double bytes = 0;
  for (const Region& r : regions) {
    const SlotDesc& slot = program.slots.at(r.slot);
    const double width = double(r.end - r.begin);
    if (slot.kind == SlotKind::activation || slot.kind == SlotKind::window)
      bytes += width * double(std::min<uint64_t>(slot.rows, tokens)) * 4.0;
    else if (slot.kind == SlotKind::kv_cache)
      bytes += width * double(context) * double(head_dim) * 4.0;
  }
  return bytes;
}

}  // namespace

TaskWork task_work(const Program& program, const TaskDesc& task, uint32_t context, uint32_t sequences) {
  TaskWork work;
  const WeightRanges ranges = task_weight_ranges(program, task);
  double weight_elements = 0;
  for (uint32_t i = 0; i < ranges.count; ++i) {
    work.weight_bytes += double(ranges.ranges[i].bytes);
    weight_elements += double(ranges.ranges[i].bytes) / double(dtype_size(program.slots[ranges.ranges[i].slot].dtype));
  }
  const OpParams& params = program.nodes[task.node].params;
  const TileRange tile{task.tile_begin, task.tile_end};
  TileFootprint fp;
  uint32_t head_dim = 0;
  uint64_t positions_read = context;  // KV-cache positions a read of one KV head covers
  visit_op(task.op, [&](auto op) {
    using Op = decltype(op);
    const auto& p = params.as<typename Op::Params>();
    Op::footprint(p, tile, fp);
    if constexpr (requires { p.head_dim; }) head_dim = p.head_dim;
    if constexpr (requires { Op::positions_read(p, tile, context); }) positions_read = Op::positions_read(p, tile, context);
  });
  const uint32_t tokens = program.tokens;
  // Writes to a KV cache append the step's tokens (positions); reads of it cover the context (a split-KV
  // chunk: its share of it).
  work.activation_bytes = region_bytes(program, fp.reads, tokens, double(positions_read) * sequences, head_dim) +
                          region_bytes(program, fp.writes, tokens, tokens, head_dim);
  if (work.weight_bytes > 0)  // a matrix tile: what it reads besides a KV cache is its input rows
    work.input_row_bytes = region_bytes(program, fp.reads, tokens, 0, head_dim);
  // A matrix tile does a multiply-add per weight element and token (the LM head projects the last token,
  // or every token of a batched decode).
  const double matrix_tokens = task.op == OpCode::lm_head ? double(params.as<LmHeadParams>().rows) : double(tokens);
  work.flops = 2.0 * weight_elements * matrix_tokens;
  if (task.op == OpCode::causal_attention)  // q.k and p.v over the visible positions (a window's), per head and token
    work.flops += 4.0 * double(tile.end - tile.begin) * double(head_dim) * double(positions_read) * double(tokens);
  if (task.op == OpCode::attention_chunk)  // the same over the chunks' positions, for the group's heads
    work.flops += 4.0 * double(AttentionChunkOp::group(params.as<AttentionChunkParams>())) * double(head_dim) *
                  double(positions_read) * double(tokens);
  if (task.op == OpCode::attention_merge)  // a rescale and two multiply-adds per chunk, dimension, head and token
    work.flops += 3.0 * double(params.as<AttentionMergeParams>().chunks) * double(head_dim) * double(tile.end - tile.begin) *
                  double(tokens);
  if (task.op == OpCode::qkv_projection) {  // half the rotated dimensions of (cos, sin) pairs per q and k head and token
    const auto& p = params.as<QkvProjectionParams>();
    uint32_t rotated = 0;
    for (uint32_t unit = tile.begin; unit < tile.end; ++unit)
      rotated += p.rope && QkvProjectionOp::segment_of(p, unit).part != QkvProjectionOp::Part::v;
    work.rotations = double(rotated) * double(p.rotated() / 2) * double(tokens);  // a partial rotation: its share
  }
  if (task.op == OpCode::norm_residual)  // the whole row's squares, then a scale, a gain and an add per column
    work.flops += (2.0 * double(params.as<NormResidualParams>().cols) + 3.0 * double(tile.end - tile.begin)) * double(tokens);
  if (task.op == OpCode::gate_up_swiglu)  // one exp per FFN column and token (silu's sigmoid, or GeGLU's)
    work.exps = double(tile.end - tile.begin) * double(tokens);
  if (task.op == OpCode::causal_attention)  // one per score
    work.exps = double(tile.end - tile.begin) * double(positions_read) * double(tokens);
  if (task.op == OpCode::attention_chunk)
    work.exps = double(AttentionChunkOp::group(params.as<AttentionChunkParams>())) * double(positions_read) * double(tokens);
  if (task.op == OpCode::attention_merge)  // one weight per chunk record
    work.exps = double(params.as<AttentionMergeParams>().chunks) * double(tile.end - tile.begin) * double(tokens);
  if (task.op == OpCode::allreduce_residual) {  // every peer's partial sums of the tile's columns
    const uint32_t ranks = params.as<AllreduceResidualParams>().ranks;
    work.link_bytes = double(ranks > 1 ? ranks - 1 : 0) * double(tile.end - tile.begin) * double(tokens) * 4.0;
    work.flops += double(ranks) * double(tile.end - tile.begin) * double(tokens);
  } else if (task.op == OpCode::allgather_logits) {  // the owners' shares of the logits (every row), except this rank's
    const auto& p = params.as<AllgatherLogitsParams>();
    for (uint32_t owner = tile.begin; owner < tile.end; ++owner) {
      if (owner == p.rank) continue;
      uint32_t begin, end;
      AllgatherLogitsOp::share(p, owner, &begin, &end);
      work.link_bytes += double(end - begin) * 4.0 * p.rows;
    }
  }
  return work;
}

std::optional<DeviceModel> device_preset(const std::string& name) {
  // Datasheet figures (NVIDIA, SXM parts): memory bandwidth and dense bf16 tensor-core peak. The per-task
  // costs are leads until GPU measurements correct them.
  // NVLink: 900 GB/s per GPU in both directions together on H100/H200 (NVLink 4), 1.8 TB/s on B200
  // (NVLink 5); half of it each way. The link latency is a lead too.
  // Rotations and exponentials per SM (a CTA's 256 threads at once), leads from datasheet rates: the
  // device computes RoPE's sincos in double (about 50 FP64 operations) at roughly 34 TFLOP/s of vector
  // FP64 over the SMs, about 0.2 ns per pair; expf is an SFU ex2 at 16 per clock per SM, about 0.03 ns.
  // Prefetch: the kernel's stage ring at its defaults (docs/CUDA.md), 32 KiB stages in the shared memory
  // one CTA gets (227 KiB a block may opt into on sm_90 and sm_100, less the kernel's 1 KiB of static
  // shared memory), less the tiles' workspace (a decode tile's input row and results: 33 KB at the 1B
  // shape's down projection, K = 8192): 6 stages there, over the CTA's upcoming tasks. `simulate` fits
  // the ring to each program's workspace (megakernel/kernel_layout.h: 5 stages at the 8B shape);
  // prefetch_bytes here is the 1B shape's ring, for callers without a program. Staged only for steps of
  // up to 4 tokens (the kernel's vector pass).
  // Peaks per dtype: dense bf16 and f16 on tensor cores; f32 on the CUDA cores (67 TFLOP/s on H100 and
  // H200 SXM, 80 on an HGX B200 at 1000 W).
  constexpr double kRingBytes = 6 * 32768, kSharedBytes = 227 * 1024 - 1024;
  auto preset = [&](const char* id, uint32_t sms, double gbs, double tensor_flops, double f32_flops, double link_gbs) {
    DeviceModel d{id, sms, gbs, tensor_flops, 500, 1000, link_gbs, 2000, 0.2, 0.03, kRingBytes, 0, 4};
    d.dtype_flops = {f32_flops, tensor_flops, tensor_flops};
    d.shared_memory_bytes = kSharedBytes;
    return d;
  };
  if (name == "h100") return preset("h100", 132, 3350, 989e12, 67e12, 450);
  if (name == "h200") return preset("h200", 132, 4800, 989e12, 67e12, 450);
  if (name == "b200") return preset("b200", 148, 8000, 2250e12, 80e12, 900);
  return std::nullopt;
}

std::vector<std::string> device_preset_names() { return {"h100", "h200", "b200"}; }

bool select_weight_dtype(DeviceModel& device, DType dtype) {
  const double own = device.dtype_flops[size_t(dtype)];
  if (own > 0) device.flops = own;
  return device.flops > 0;
}

double modelled_link_ns(const DeviceModel& device, const TaskWork& work) {
  if (work.link_bytes <= 0 || device.link_gbs <= 0) return 0;
  return device.link_latency_ns + work.link_bytes / (device.link_gbs / double(device.workers));
}

double modelled_epilogue_ns(const DeviceModel& device, const TaskWork& work) {
  return work.rotations * device.rotation_ns + work.exps * device.exp_ns;
}

double streamed_bytes(const DeviceModel& device, const TaskWork& work) {
  return work.bytes() - (device.input_rows_cached ? work.input_row_bytes : 0.0);
}

double modelled_task_ns(const DeviceModel& device, const TaskWork& work) {
  const double share_bytes_per_ns = device.memory_gbs / double(device.workers);  // GB/s = bytes/ns
  const double share_flops_per_ns = device.flops * 1e-9 / double(device.workers);
  return std::max(streamed_bytes(device, work) / share_bytes_per_ns, work.flops / share_flops_per_ns) + modelled_epilogue_ns(device, work) +
         device.dispatch_ns + modelled_link_ns(device, work);
}

}  // namespace tilefire
