// The device encoding of a Program: everything the persistent kernel reads comes back unchanged through
// DeviceProgramView, and the precomputed tables (bsp queues, waiters, weight streams) agree with an
// independent recomputation from the Program.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "graph/compile.h"
#include "graph/model_spec.h"
#include "megakernel/cuda/device_job.h"
#include "scheduler/device_program.h"

namespace tilefire::testing {
namespace {

Program compiled(const std::string& preset, uint32_t workers, uint32_t tokens, const std::string& policy) {
  CompileOptions options;
  options.workers = workers;
  options.tokens = tokens;
  options.max_context = 64;
  options.policy = policy;
  return compile_model(preset_spec(preset, DType::bf16), options);
}

void expect_round_trip(const Program& p) {
  const EncodedProgram encoded = encode_device_program(p);
  ASSERT_EQ(encoded.blob.size(), encoded.header.total_bytes);
  // Decode from a copy at another address, as the device does: nothing in the blob is a pointer.
  std::vector<unsigned char> copy(encoded.blob);
  const auto& header = *reinterpret_cast<const DeviceProgramHeader*>(copy.data());
  ASSERT_EQ(header.magic, kDeviceProgramMagic);
  ASSERT_EQ(header.version, kDeviceProgramVersion);
  const DeviceProgramView v = view_device_program(header, copy.data());
  ASSERT_EQ(v.header->task_count, p.tasks.size());
  ASSERT_EQ(v.header->event_count, p.events.size());
  ASSERT_EQ(v.header->node_count, p.nodes.size());
  EXPECT_EQ(v.header->tokens, p.tokens);
  for (size_t t = 0; t < p.tasks.size(); ++t) {
    ASSERT_EQ(0, std::memcmp(&v.tasks[t], &p.tasks[t], sizeof(TaskDesc))) << "task " << t;
    for (uint32_t i = 0; i < p.tasks[t].wait_count; ++i)
      ASSERT_EQ(v.waits[p.tasks[t].wait_begin + i], p.waits[p.tasks[t].wait_begin + i]);
    for (uint32_t i = 0; i < p.tasks[t].signal_count; ++i)
      ASSERT_EQ(v.signals[p.tasks[t].signal_begin + i], p.signals[p.tasks[t].signal_begin + i]);
  }
  for (size_t e = 0; e < p.events.size(); ++e) ASSERT_EQ(v.triggers[e], p.events[e].trigger_count);
  for (size_t n = 0; n < p.nodes.size(); ++n) {
    ASSERT_EQ(0, std::memcmp(&v.node_params[n], &p.nodes[n].params, sizeof(OpParams)));
    ASSERT_EQ(v.node_done[n], p.nodes[n].done_event);
    ASSERT_EQ(v.node_first_task[n], p.nodes[n].first_task);
    ASSERT_EQ(v.node_first_task[n + 1] - v.node_first_task[n], p.nodes[n].task_count);
  }
  if (p.placement == Placement::static_queues) {
    ASSERT_EQ(v.header->worker_count, p.queues.size());
    for (size_t w = 0; w < p.queues.size(); ++w) {
      const uint32_t begin = v.queue_begin[w], end = v.queue_begin[w + 1];
      ASSERT_EQ(end - begin, p.queues[w].size());
      std::vector<uint32_t> queue(v.queue_tasks + begin, v.queue_tasks + end);
      EXPECT_EQ(queue, p.queues[w]);
      // bsp: the same tasks, nodes in ascending order, a node's tiles in queue order.
      std::vector<uint32_t> bsp(v.bsp_tasks + begin, v.bsp_tasks + end);
      EXPECT_EQ(std::multiset<uint32_t>(bsp.begin(), bsp.end()), std::multiset<uint32_t>(queue.begin(), queue.end()));
      for (size_t i = 1; i < bsp.size(); ++i) {
        ASSERT_LE(p.tasks[bsp[i - 1]].node, p.tasks[bsp[i]].node);
        if (p.tasks[bsp[i - 1]].node == p.tasks[bsp[i]].node) {
          auto a = std::find(queue.begin(), queue.end(), bsp[i - 1]), b = std::find(queue.begin(), queue.end(), bsp[i]);
          EXPECT_LT(a, b);
        }
      }
    }
  }
  // Waiters: task t is listed under event e exactly as often as t waits on e.
  for (size_t e = 0; e < p.events.size(); ++e) {
    std::multiset<uint32_t> listed(v.waiters + v.waiter_begin[e], v.waiters + v.waiter_begin[e + 1]), expected;
    for (uint32_t t = 0; t < p.tasks.size(); ++t)
      for (uint32_t i = 0; i < p.tasks[t].wait_count; ++i)
        if (p.waits[p.tasks[t].wait_begin + i] == e) expected.insert(t);
    ASSERT_EQ(listed, expected) << "event " << e;
  }
  std::vector<uint32_t> ready(v.initial_ready, v.initial_ready + v.header->initial_ready_count), expected_ready;
  for (uint32_t t = 0; t < p.tasks.size(); ++t)
    if (p.tasks[t].wait_count == 0) expected_ready.push_back(t);
  EXPECT_EQ(ready, expected_ready);
}

TEST(DeviceProgram, RoundTripsStaticAndDynamicPrograms) {
  expect_round_trip(compiled("tiny", 4, 1, "balanced"));
  expect_round_trip(compiled("tiny", 3, 5, "critical-path"));
  expect_round_trip(compiled("small", 132, 1, "balanced"));
  expect_round_trip(compiled("tiny", 4, 1, "dynamic"));
}

// Weight streams cover exactly the weight bytes a decode step reads, in whole rows.
TEST(DeviceProgram, WeightStreamsCoverEveryMatrixOnce) {
  const Program p = compiled("small", 8, 1, "balanced");
  const EncodedProgram encoded = encode_device_program(p);
  const DeviceProgramView v = view_device_program(encoded.header, encoded.blob.data());
  std::map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> covered;  // slot -> [begin, end) bytes
  uint32_t max_rows = 0;
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    const WeightStreamDesc& s = v.weight_streams[t];
    uint32_t rows = 0;
    for (uint32_t r = 0; r < s.range_count; ++r) {
      const auto& range = s.ranges[r];
      const SlotDesc& slot = p.slots[range.slot];
      ASSERT_EQ(slot.kind, SlotKind::weight);
      ASSERT_EQ(s.row_bytes, slot.cols * 2) << slot.name;  // bf16 rows
      covered[range.slot].push_back({range.offset, range.offset + uint64_t(range.rows) * s.row_bytes});
      rows += range.rows;
    }
    max_rows = std::max(max_rows, rows);
  }
  EXPECT_EQ(v.header->max_task_weight_rows, max_rows);
  for (auto& [slot, spans] : covered) {
    std::sort(spans.begin(), spans.end());
    uint64_t next = 0;
    for (auto [begin, end] : spans) {
      ASSERT_EQ(begin, next) << p.slots[slot].name << ": a gap or an overlap";
      next = end;
    }
    // The embedding table is read by lm_head only when tied; every streamed matrix is read whole.
    EXPECT_EQ(next, slot_bytes(p.slots[slot])) << p.slots[slot].name;
  }
}

TEST(DeviceProgram, RejectsAnUnknownOpcode) {
  Program p = compiled("tiny", 2, 1, "balanced");
  p.tasks[3].op = static_cast<OpCode>(999);
  try {
    encode_device_program(p);
    FAIL() << "an unknown opcode was encoded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown opcode 999"), std::string::npos) << e.what();
  }
}

// How the producer warp and the consumer warps cut a staged weight stream (one walk, for_each_stream_chunk,
// shared by both): every byte of every row exactly once, each chunk within a stage, whole rows when a
// stage holds kDeviceConsumerWarps of them or more, and otherwise groups of kDeviceConsumerWarps rows in
// segments of a multiple of 512 bytes (so each lane reads a wide row's vectors as from global memory),
// a group's segments in order with its last one ending the rows (where a consumer warp stores its sums),
// and each chunk's first row counted over the whole stream (where its results go).
TEST(StreamChunks, CoverEveryRowByteOnceInOrderWithinAStage) {
  for (uint32_t stage : {32768u, 36864u, 65536u, 2048u})
    for (uint32_t row_bytes : {4096u, 16384u, 8192u, 12304u, 32768u, 2064u, 1024u}) {
      if (row_bytes > stage) continue;  // never staged (task_streams_staged)
      const std::string where = "stage " + std::to_string(stage) + ", row_bytes " + std::to_string(row_bytes);
      WeightStreamDesc s;
      s.row_bytes = row_bytes;
      s.range_count = 3;
      s.ranges[0].rows = 13;
      s.ranges[1].rows = 8;
      s.ranges[2].rows = 3;
      std::vector<std::vector<uint32_t>> covered(3);  // per range: visits per row byte
      for (uint32_t r = 0; r < 3; ++r) covered[r].assign(size_t(s.ranges[r].rows) * row_bytes, 0);
      std::vector<uint32_t> rows_ended(24, 0);  // per stream row: chunks that ended it
      const bool wide = stage / row_bytes < kDeviceConsumerWarps && stage / kDeviceConsumerWarps >= 512;
      uint32_t next_stream_row = 0, expected_begin = 0, chunks = 0;
      for_each_stream_chunk(s, stage, [&](const StreamChunk& c) {
        ++chunks;
        const uint32_t range_first = c.range == 0 ? 0 : c.range == 1 ? 13 : 21;
        EXPECT_EQ(c.stream_row, range_first + c.first_row) << where;
        EXPECT_EQ(c.stream_row, next_stream_row) << where << ": chunks out of order";
        EXPECT_EQ(c.byte_begin, expected_begin) << where << ": segments out of order";
        EXPECT_LE(uint64_t(c.rows - 1) * c.row_pitch + c.bytes_per_row, stage) << where;
        EXPECT_EQ(c.whole_rows(), !wide) << where;
        if (wide) {
          EXPECT_LE(c.rows, kDeviceConsumerWarps);
          EXPECT_EQ(c.row_pitch % 512, 0u);
          EXPECT_EQ(c.byte_begin % 512, 0u);
        }
        for (uint32_t i = 0; i < c.rows; ++i) {
          for (uint32_t b = c.byte_begin; b < c.byte_begin + c.bytes_per_row; ++b)
            ++covered[c.range][size_t(c.first_row + i) * row_bytes + b];
          if (c.ends_rows(row_bytes)) ++rows_ended[c.stream_row + i];
        }
        if (c.ends_rows(row_bytes)) {
          next_stream_row += c.rows;
          expected_begin = 0;
        } else {
          expected_begin = c.byte_begin + c.bytes_per_row;
        }
        return true;
      });
      EXPECT_GT(chunks, 0u) << where;
      EXPECT_EQ(next_stream_row, 24u) << where;
      for (uint32_t row = 0; row < 24; ++row) EXPECT_EQ(rows_ended[row], 1u) << where << ", stream row " << row;
      for (uint32_t r = 0; r < 3; ++r)
        for (size_t b = 0; b < covered[r].size(); ++b)
          ASSERT_EQ(covered[r][b], 1u) << where << ", range " << r << ", byte " << b;
    }
  // A walk stopped by its visitor (an aborted kernel) ends there.
  WeightStreamDesc s;
  s.row_bytes = 16384;
  s.range_count = 1;
  s.ranges[0].rows = 16;
  uint32_t visited = 0;
  for_each_stream_chunk(s, 32768, [&](const StreamChunk&) { return ++visited < 3; });
  EXPECT_EQ(visited, 3u);
}

}  // namespace
}  // namespace tilefire::testing
