// The compile pipeline: model -> primitive graph -> fuse -> tiles -> dependencies (from the regions tiles read and write) -> events ->
// placement -> validation, as a oneTBB flow graph. The passes form a chain (each needs the last one's
// output); the work inside a pass (tiling node by node, dependency analysis task by task) runs in parallel.
#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include "graph/compile.h"
#include "graph/primitive_graph.h"
#include "graph/tensor_parallel.h"
#include "ops/all_ops.h"
#include "scheduler/policy.h"
#include "scheduler/validator.h"

namespace tilefire {
namespace {

OpCode node_op(const OpNode& node) { return node.params.op; }

uint32_t node_units(const OpNode& node) {
  uint32_t units = 0;
  visit_op(node_op(node), [&](auto op) {
    using Op = decltype(op);
    units = Op::tile_units(node.params.as<typename Op::Params>());
  });
  return units;
}

TileFootprint tile_footprint(const OpParams& params, TileRange tile) {
  TileFootprint fp;
  visit_op(params.op, [&](auto op) {
    using Op = decltype(op);
    Op::footprint(params.as<typename Op::Params>(), tile, fp);
  });
  return fp;
}

// Cuts [0, units) into tiles of `width`, restarting at every break so no tile crosses one.
std::vector<TileRange> cut_tiles(uint32_t units, uint32_t width, std::vector<uint32_t> breaks) {
  std::vector<TileRange> tiles;
  breaks.push_back(units);
  std::sort(breaks.begin(), breaks.end());
  uint32_t begin = 0;
  for (uint32_t stop : breaks) {
    stop = std::min(stop, units);
    for (; begin < stop; begin = std::min(stop, begin + width)) tiles.push_back({begin, std::min(stop, begin + width)});
  }
  return tiles;
}

struct TileOfNode {
  uint32_t node;
  TileRange range;
};

struct Producer {
  uint32_t node;
  std::vector<TileRange> write_ranges;  // per tile of the node, the range it writes of this slot
};

// What one consumer task needs from one producer node: every tile, or these tiles.
struct Need {
  uint32_t node;
  std::vector<uint32_t> tiles;  // indices within the producer node; empty when it reads every tile
  bool every_tile = false;      // it reads every tile of the producer: it waits on the done event
  std::vector<Region> reads;    // what the task reads of the slots that node writes (head granularity)
};

bool overlaps(uint32_t a0, uint32_t a1, uint32_t b0, uint32_t b1) { return a0 < b1 && b0 < a1; }

// The pipeline. With `spec`, it starts from the model: build the primitive graph, fuse; otherwise from the
// fused `given` graph. Then tile, dependencies, events, placement, validation.
Program run_pipeline(const ModelSpec* spec, const OpGraph* given, const CompileOptions& options) {
  if (options.workers == 0) throw std::runtime_error("compile: --threads must be at least 1");
  if (options.tokens == 0) throw std::runtime_error("compile: a step needs at least one token");
  if (options.logit_rows > options.tokens)
    throw std::runtime_error("compile: " + std::to_string(options.logit_rows) + " logit rows in a step of " +
                             std::to_string(options.tokens) + " tokens");
  Program program;
  program.tokens = options.tokens;
  program.granularity = options.granularity;
  PrimitiveGraph primitives;
  OpGraph fused;
  const OpGraph& graph = given ? *given : fused;
  uint32_t node_count = 0;
  std::vector<std::vector<TileRange>> tiles_of_node;
  std::vector<std::vector<Need>> needs;            // per task
  std::map<uint32_t, Producer> producer_of_slot;   // slot -> the node writing it this step

  using namespace oneapi::tbb;
  // The passes run inside an arena. Under ThreadSanitizer it has one thread: libtbb is not instrumented,
  // so TSan cannot see its hand-offs and would flag every pass; TSan's attention belongs to the executor.
#if defined(__SANITIZE_THREAD__)
  task_arena arena(1);
#else
  task_arena arena(task_arena::automatic);
#endif
  std::exception_ptr failure;
  std::mutex failure_mutex;
  arena.execute([&] {
    flow::graph g;
    auto guarded = [&](auto&& body) {
      return [&, body](flow::continue_msg) {
        {
          std::lock_guard lock(failure_mutex);
          if (failure) return;
        }
        try {
          body();
        } catch (...) {
          std::lock_guard lock(failure_mutex);
          if (!failure) failure = std::current_exception();
        }
      };
    };

    // Passes 1 and 2 (from a model): the unfused graph of one step, then the fuse pass.
    // Under tensor parallelism the graph is built for the rank's share of the heads, FFN and vocabulary
    // (local_spec), then the shard pass binds it to slices of the checkpoint and adds the collectives.
    std::optional<TensorParallelSplit> split;
    if (spec && options.tp > 1) {
      split = split_tensor_parallel(*spec, options.tp);
      if (options.rank >= options.tp)
        throw InputError("compile: rank " + std::to_string(options.rank) + " of " + std::to_string(options.tp) + " ranks");
    }
    flow::continue_node<flow::continue_msg> primitive_pass(g, guarded([&] {
      primitives = build_primitive_graph(split ? local_spec(*spec, *split, options.rank) : *spec, options);
    }));
    flow::continue_node<flow::continue_msg> fuse_pass(g, guarded([&] { fused = fuse_primitive_graph(primitives, options); }));
    flow::continue_node<flow::continue_msg> shard_pass(g, guarded([&] {
      if (split) fused = shard_op_graph(std::move(fused), *spec, *split, options);
    }));

    // Pass 3: tile every node (in parallel), then lay the tasks out node by node.
    flow::continue_node<flow::continue_msg> tile_pass(g, guarded([&] {
      program.slots = graph.slots;
      program.constants = graph.constants;
      program.collective_flags = graph.collective_flags;
      node_count = uint32_t(graph.nodes.size());
      tiles_of_node.assign(node_count, {});
      parallel_for(uint32_t(0), node_count, [&](uint32_t n) {
        const OpNode& node = graph.nodes[n];
        tiles_of_node[n] = cut_tiles(node_units(node), std::max(1u, node.tile_width), node.breaks);
      });
      uint64_t task_count = 0;
      for (const std::vector<TileRange>& tiles : tiles_of_node) task_count += tiles.size();
      if (task_count > options.most_tasks)
        throw InputError("compile: the program of this model for " + std::to_string(options.workers) + " workers has " +
                         std::to_string(task_count) + " tasks, more than the " + std::to_string(options.most_tasks) +
                         " Tilefire compiles (is config.json damaged, or the worker count far too high?)");
      program.nodes.resize(node_count);
      for (uint32_t n = 0; n < node_count; ++n) {
        NodeDesc& desc = program.nodes[n];
        desc.params = graph.nodes[n].params;
        desc.first_task = uint32_t(program.tasks.size());
        desc.task_count = uint32_t(tiles_of_node[n].size());
        uint32_t index = 0;
        for (TileRange r : tiles_of_node[n]) {
          TaskDesc t;
          t.op = desc.params.op;
          t.layer = desc.params.layer;
          t.node = n;
          t.tile_begin = r.begin;
          t.tile_end = r.end;
          t.tile_index = index++;
          program.tasks.push_back(t);
        }
        size_t scratch = 0;
        visit_op(desc.params.op, [&](auto op) {
          using Op = decltype(op);
          scratch = Op::scratch_floats(desc.params.as<typename Op::Params>(), options.tokens);
        });
        program.scratch_floats = std::max(program.scratch_floats, scratch);
      }
    }));

    // Pass 4: who writes each slot, then (in parallel, task by task) which producer tiles each task reads.
    flow::continue_node<flow::continue_msg> dependency_pass(g, guarded([&] {
      for (uint32_t n = 0; n < node_count; ++n) {
        for (uint32_t i = 0; i < tiles_of_node[n].size(); ++i) {
          TileFootprint fp = tile_footprint(program.nodes[n].params, tiles_of_node[n][i]);
          for (const Region& w : fp.writes) {
            auto [it, fresh] = producer_of_slot.try_emplace(w.slot, Producer{n, {}});
            if (!fresh && it->second.node != n)
              throw std::runtime_error("compile: slot '" + program.slots[w.slot].name + "' is written by two ops (" +
                                       std::string(op_name(program.nodes[it->second.node].params.op)) + " and " +
                                       std::string(op_name(program.nodes[n].params.op)) + ")");
            it->second.write_ranges.resize(tiles_of_node[n].size());
            TileRange& range = it->second.write_ranges[i];
            if (range.end != range.begin)  // the analysis keeps one range per tile and slot
              throw std::runtime_error("compile: a tile of " + std::string(op_name(program.nodes[n].params.op)) +
                                       " writes two regions of slot '" + program.slots[w.slot].name + "'");
            range = {w.begin, w.end};
          }
        }
      }
      needs.resize(program.tasks.size());
      std::atomic<uint64_t> producer_tiles_read{0};
      parallel_for(size_t(0), program.tasks.size(), [&](size_t t) {
        const TaskDesc& task = program.tasks[t];
        TileFootprint fp = tile_footprint(program.nodes[task.node].params, {task.tile_begin, task.tile_end});
        std::map<uint32_t, Need> by_node;
        for (const Region& r : fp.reads) {
          const SlotDesc& slot = program.slots[r.slot];
          auto it = producer_of_slot.find(r.slot);
          if (it == producer_of_slot.end()) {
            if (slot.kind == SlotKind::activation || slot.kind == SlotKind::window)
              throw std::runtime_error("compile: " + std::string(op_name(task.op)) + " reads activation '" + slot.name +
                                       "', which no op of the step produces");
            continue;  // weights, constants, and KV-cache positions written by earlier steps
          }
          const Producer& producer = it->second;
          Need& need = by_node[producer.node];
          need.node = producer.node;
          need.reads.push_back(r);
          for (uint32_t i = 0; i < producer.write_ranges.size(); ++i) {
            TileRange w = producer.write_ranges[i];
            if (overlaps(w.begin, w.end, r.begin, r.end)) need.tiles.push_back(i);
          }
        }
        for (auto& [node, need] : by_node) {
          std::sort(need.tiles.begin(), need.tiles.end());
          need.tiles.erase(std::unique(need.tiles.begin(), need.tiles.end()), need.tiles.end());
          // A read of every tile is one wait on the done event: kept as that, not as the list, whose
          // total would grow with the square of the worker count (a matmul tile reads the whole row).
          if (need.tiles.size() == program.nodes[node].task_count) {
            need.every_tile = true;
            std::vector<uint32_t>().swap(need.tiles);
          }
          if (producer_tiles_read.fetch_add(need.tiles.size(), std::memory_order_relaxed) + need.tiles.size() > options.most_producer_tiles)
            throw InputError("compile: the program of this model for " + std::to_string(options.workers) + " workers reads more than " +
                             std::to_string(options.most_producer_tiles) + " single producer tiles across its tasks, more than " +
                             "Tilefire compiles (is config.json damaged, or the worker count far too high?)");
          needs[t].push_back(std::move(need));
        }
      });
    }));

    // Pass 5: events. A consumer that needs every tile of a producer (or any tile, at op granularity)
    // waits on the producer's done event (trigger = its tile count). Otherwise, at tile granularity, on
    // one event per producer tile it reads; at head granularity, on one event per head-wide band of the
    // slot it reads (a band's event fires when every producer tile writing into the band is done, so the
    // event count follows the heads, not the tiling).
    std::vector<std::vector<uint32_t>> task_waits(0);
    flow::continue_node<flow::continue_msg> event_pass(g, guarded([&] {
      const size_t task_count = program.tasks.size();
      std::vector<uint32_t> tile_event(task_count, kNoSlot);
      std::vector<std::vector<uint32_t>> band_signals(task_count);  // head granularity: per producer task
      std::map<std::pair<uint32_t, uint64_t>, uint32_t> band_event;  // (slot, band) -> event
      task_waits.assign(task_count, {});
      auto new_event = [&](uint32_t trigger) {
        program.events.push_back({trigger});
        return uint32_t(program.events.size() - 1);
      };
      if (options.granularity == EventGranularity::head && options.head_width == 0)
        throw std::runtime_error("compile: head granularity needs the head width (CompileOptions::head_width)");
      // Units per band of a slot: a KV-cache region counts KV heads; other regions count columns.
      auto band_width = [&](uint32_t slot) -> uint64_t {
        const SlotDesc& s = program.slots[slot];
        return s.kind == SlotKind::kv_cache ? 1 : s.head_cols != 0 ? s.head_cols : options.head_width;
      };
      auto wait_on_bands = [&](size_t t, const Need& need) {
        const Producer& producer = producer_of_slot.at(need.reads.front().slot);
        for (const Region& r : need.reads) {
          const std::vector<TileRange>& writes = producer_of_slot.at(r.slot).write_ranges;
          const uint64_t width = band_width(r.slot);
          for (uint64_t band = r.begin / width; band * width < r.end; ++band) {
            auto [it, fresh] = band_event.try_emplace({r.slot, band}, kNoSlot);
            if (fresh) {
              std::vector<uint32_t> writers;
              for (uint32_t i = 0; i < writes.size(); ++i)
                if (overlaps(writes[i].begin, writes[i].end, band * width, (band + 1) * width)) writers.push_back(i);
              it->second = new_event(uint32_t(writers.size()));
              for (uint32_t i : writers) band_signals[program.nodes[producer.node].first_task + i].push_back(it->second);
            }
            task_waits[t].push_back(it->second);
          }
        }
      };
      for (size_t t = 0; t < task_count; ++t) {
        for (const Need& need : needs[t]) {
          NodeDesc& producer = program.nodes[need.node];
          if (options.granularity == EventGranularity::op || need.every_tile) {
            if (producer.done_event == kNoSlot) producer.done_event = new_event(producer.task_count);
            task_waits[t].push_back(producer.done_event);
          } else if (options.granularity == EventGranularity::head) {
            wait_on_bands(t, need);
          } else {
            for (uint32_t i : need.tiles) {
              uint32_t& e = tile_event[producer.first_task + i];
              if (e == kNoSlot) e = new_event(1);
              task_waits[t].push_back(e);
            }
          }
        }
        if (options.granularity == EventGranularity::head) {  // two regions of one band: one wait
          std::sort(task_waits[t].begin(), task_waits[t].end());
          task_waits[t].erase(std::unique(task_waits[t].begin(), task_waits[t].end()), task_waits[t].end());
        }
      }
      for (size_t t = 0; t < task_count; ++t) {
        TaskDesc& task = program.tasks[t];
        task.wait_begin = uint32_t(program.waits.size());
        task.wait_count = uint16_t(task_waits[t].size());
        if (task_waits[t].size() > 0xffff) throw std::runtime_error("compile: a task waits on more than 65535 events");
        program.waits.insert(program.waits.end(), task_waits[t].begin(), task_waits[t].end());
        task.signal_begin = uint32_t(program.signals.size());
        uint32_t done = program.nodes[task.node].done_event;
        if (done != kNoSlot) program.signals.push_back(done);
        if (tile_event[t] != kNoSlot) program.signals.push_back(tile_event[t]);
        program.signals.insert(program.signals.end(), band_signals[t].begin(), band_signals[t].end());
        if (program.signals.size() - task.signal_begin > 0xffff)
          throw std::runtime_error("compile: a task signals more than 65535 events");
        task.signal_count = uint16_t(program.signals.size() - task.signal_begin);
      }
    }));

    // Pass 6: placement, then the validator's proof (ranges, trigger counts, acyclic, no queue deadlock).
    flow::continue_node<flow::continue_msg> placement_pass(g, guarded([&] {
      const PlacementPolicy* policy = find_policy(options.policy);
      if (!policy) throw std::runtime_error("compile: unknown placement policy '" + options.policy + "' (expected one of " + policy_names() + ")");
      policy->place(program, options.workers);
    }));
    flow::continue_node<flow::continue_msg> validate_pass(g, guarded([&] { validate_program(program); }));

    flow::make_edge(primitive_pass, fuse_pass);
    flow::make_edge(fuse_pass, shard_pass);
    flow::make_edge(shard_pass, tile_pass);
    flow::make_edge(tile_pass, dependency_pass);
    flow::make_edge(dependency_pass, event_pass);
    flow::make_edge(event_pass, placement_pass);
    flow::make_edge(placement_pass, validate_pass);
    if (spec)
      primitive_pass.try_put(flow::continue_msg());
    else
      tile_pass.try_put(flow::continue_msg());
    g.wait_for_all();
  });
  if (failure) std::rethrow_exception(failure);
  return program;
}

}  // namespace

Program compile_graph(const OpGraph& graph, const CompileOptions& options) { return run_pipeline(nullptr, &graph, options); }

Program compile_model(const ModelSpec& spec, const CompileOptions& options) {
  CompileOptions with_heads = options;
  if (with_heads.head_width == 0) with_heads.head_width = spec.head_dim;
  Program program = run_pipeline(&spec, nullptr, with_heads);
  // Tensor parallelism: ranks wait on each other inside their collective tasks, so each must place its
  // tasks as rank 0 does. The shard pass gives every rank the same tiles, but a policy that weighs tiles
  // by their bytes (locality, critical-path) can still place them apart when the FFN or vocabulary splits
  // unevenly (a row more on some ranks). So another rank takes rank 0's queues, checked again.
  if (with_heads.tp > 1 && with_heads.rank != 0 && program.placement == Placement::static_queues) {
    CompileOptions first_rank = with_heads;
    first_rank.rank = 0;
    const Program rank0 = run_pipeline(&spec, nullptr, first_rank);
    bool same_tasks = rank0.tasks.size() == program.tasks.size() && rank0.placement == Placement::static_queues;
    for (size_t t = 0; same_tasks && t < program.tasks.size(); ++t)
      same_tasks = rank0.tasks[t].op == program.tasks[t].op && rank0.tasks[t].node == program.tasks[t].node;
    if (same_tasks && rank0.queues != program.queues) {
      program.queues = rank0.queues;
      validate_program(program);
    }
  }
  return program;
}

}  // namespace tilefire
