// Encoding a Program into the flat blob a device scheduler reads (scheduler/device_program.h).
#include "scheduler/device_program.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "ops/all_ops.h"

namespace tilefire {

namespace {

// Appends arrays to a growing blob, each at a 64-byte aligned offset.
class BlobWriter {
 public:
  explicit BlobWriter(std::vector<unsigned char>& blob) : blob_(blob) {}
  template <class T>
  uint64_t append(const T* data, size_t count) {
    const uint64_t offset = (blob_.size() + 63) / 64 * 64;
    blob_.resize(offset + std::max<size_t>(count * sizeof(T), 1));
    if (count) std::memcpy(blob_.data() + offset, data, count * sizeof(T));
    return offset;
  }
  template <class T>
  uint64_t append(const std::vector<T>& v) { return append(v.data(), v.size()); }

 private:
  std::vector<unsigned char>& blob_;
};

}  // namespace

WeightStreamDesc weight_stream_of(const Program& program, const TaskDesc& task) {
  const WeightRanges ranges = task_weight_ranges(program, task);
  WeightStreamDesc stream;
  for (uint32_t i = 0; i < ranges.count; ++i) {
    const WeightRanges::Range& r = ranges.ranges[i];
    const SlotDesc& slot = program.slots.at(r.slot);
    const uint64_t row_bytes = slot.cols * dtype_size(slot.dtype);
    if (row_bytes == 0 || r.bytes % row_bytes || r.offset % row_bytes)
      throw std::runtime_error("device program: task of " + std::string(op_name(task.op)) + " streams part of a row of '" +
                               slot.name + "'");
    if (stream.row_bytes && stream.row_bytes != row_bytes)
      throw std::runtime_error("device program: task of " + std::string(op_name(task.op)) +
                               " streams matrices of different row widths");
    stream.row_bytes = uint32_t(row_bytes);
    stream.ranges[stream.range_count++] = {r.slot, uint32_t(r.bytes / row_bytes), r.offset};
  }
  return stream;
}

EncodedProgram encode_device_program(const Program& program) {
  const uint32_t tasks = uint32_t(program.tasks.size()), events = uint32_t(program.events.size());
  EncodedProgram encoded;
  DeviceProgramHeader& h = encoded.header;
  h.task_count = tasks;
  h.event_count = events;
  h.node_count = uint32_t(program.nodes.size());
  h.slot_count = uint32_t(program.slots.size());
  h.tokens = program.tokens;
  h.placement = uint8_t(program.placement);
  h.granularity = uint8_t(program.granularity);
  for (const TaskDesc& t : program.tasks)
    if (uint16_t(t.op) >= uint16_t(OpCode::count))
      throw std::runtime_error("device program: task with unknown opcode " + std::to_string(uint16_t(t.op)));

  std::vector<uint32_t> triggers(events), node_done(program.nodes.size()), node_first_task;
  for (uint32_t e = 0; e < events; ++e) triggers[e] = program.events[e].trigger_count;
  std::vector<OpParams> params(program.nodes.size());
  for (size_t n = 0; n < program.nodes.size(); ++n) {
    params[n] = program.nodes[n].params;
    node_done[n] = program.nodes[n].done_event;
    node_first_task.push_back(program.nodes[n].first_task);
  }
  node_first_task.push_back(tasks);

  // Static queues and their bsp regrouping (stable: a node's tiles keep their queue order).
  std::vector<uint32_t> queue_begin{0}, queue_tasks, bsp_tasks;
  if (program.placement == Placement::static_queues) {
    h.worker_count = uint32_t(program.queues.size());
    for (const auto& queue : program.queues) {
      queue_tasks.insert(queue_tasks.end(), queue.begin(), queue.end());
      std::vector<uint32_t> regrouped = queue;
      std::stable_sort(regrouped.begin(), regrouped.end(),
                       [&](uint32_t a, uint32_t b) { return program.tasks[a].node < program.tasks[b].node; });
      bsp_tasks.insert(bsp_tasks.end(), regrouped.begin(), regrouped.end());
      queue_begin.push_back(uint32_t(queue_tasks.size()));
    }
  }

  // event -> waiting tasks (compressed rows), and the tasks that wait on nothing.
  std::vector<uint32_t> waiter_begin(events + 1, 0), waiters, initial_ready;
  for (const TaskDesc& t : program.tasks)
    for (uint32_t i = 0; i < t.wait_count; ++i) ++waiter_begin[program.waits.at(t.wait_begin + i) + 1];
  for (uint32_t e = 0; e < events; ++e) waiter_begin[e + 1] += waiter_begin[e];
  waiters.resize(waiter_begin[events]);
  std::vector<uint32_t> fill(waiter_begin.begin(), waiter_begin.end() - 1);
  std::vector<WeightStreamDesc> streams(tasks);
  for (uint32_t t = 0; t < tasks; ++t) {
    const TaskDesc& task = program.tasks[t];
    for (uint32_t i = 0; i < task.wait_count; ++i) waiters[fill[program.waits[task.wait_begin + i]]++] = t;
    if (task.wait_count == 0) initial_ready.push_back(t);
    streams[t] = weight_stream_of(program, task);
    uint32_t rows = 0;
    for (uint32_t r = 0; r < streams[t].range_count; ++r) rows += streams[t].ranges[r].rows;
    h.max_task_weight_rows = std::max(h.max_task_weight_rows, rows);
  }
  h.initial_ready_count = uint32_t(initial_ready.size());

  std::vector<unsigned char>& blob = encoded.blob;
  blob.resize(sizeof(DeviceProgramHeader));
  BlobWriter w(blob);
  h.tasks = w.append(program.tasks);
  h.waits = w.append(program.waits);
  h.signals = w.append(program.signals);
  h.triggers = w.append(triggers);
  h.node_params = w.append(params);
  h.node_done = w.append(node_done);
  h.node_first_task = w.append(node_first_task);
  h.queue_begin = w.append(queue_begin);
  h.queue_tasks = w.append(queue_tasks);
  h.bsp_tasks = w.append(bsp_tasks);
  h.waiter_begin = w.append(waiter_begin);
  h.waiters = w.append(waiters);
  h.initial_ready = w.append(initial_ready);
  h.weight_streams = w.append(streams);
  blob.resize((blob.size() + 63) / 64 * 64);
  h.total_bytes = blob.size();
  std::memcpy(blob.data(), &h, sizeof(h));
  return encoded;
}

}  // namespace tilefire
