#pragma once
// Placement policies: which worker runs which task. Static policies fill Program::queues; the dynamic
// ready queue leaves them empty and lets the backend hand out tasks as they become ready.
#include "scheduler/program.h"

namespace tilefire {

// Tiles of each node go round-robin over the workers, continuing from where the previous node stopped,
// and every queue stays in topological (task id) order.
void place_static_round_robin(Program& program, uint32_t workers);

// Per node, each tile goes to the worker with the least work of that node so far (work = tile width:
// all units of one op cost the same), ties to the next worker in rotation. Balances nodes whose tiles
// differ in width (QKV: q tiles of several heads, k and v tiles of one), and every op boundary is
// all-to-all in a decoder step, so per-node balance is what bounds the idle time. The default.
void place_static_balanced(Program& program, uint32_t workers);

// Dynamic ready queue: no static queues.
void place_dynamic(Program& program, uint32_t workers);

void place(Program& program, Placement placement, uint32_t workers);

}  // namespace tilefire
