#pragma once
// The validator: proves a Program safe to run before any executor sees it.
//  - every index (nodes, events, waits, signals, queue entries) is in range, every opcode is known, every
//    task lies in its node's range, every task is queued exactly once;
//  - every event's trigger count is at least 1 and equals the signals it receives per step (an event
//    nothing signals, or too little, would hang its waiters);
//  - the task graph (signaller -> waiter) is acyclic;
//  - with static queues, running every queue in order cannot deadlock (checked by simulation).
#include <stdexcept>
#include <string>

#include "scheduler/program.h"

namespace tilefire {

struct ProgramError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws ProgramError naming the task (op, layer, tile) and event at fault.
void validate_program(const Program& program);

// Why the program cannot run as bsp, or "" when it can. bsp runs the nodes in order with a barrier
// between them and waits on no event, so every signaller -> waiter edge must go to a later node (the
// compiler's programs all do; a hand-made chain within one node runs as dataflow only). The executors
// refuse a bsp step of a program that breaks this, which would otherwise give wrong output.
std::string bsp_order_violation(const Program& program);

// "qkv_projection layer 3 tile [4, 6) (task 17)" for messages and traces.
std::string describe_task(const Program& program, uint32_t task);

}  // namespace tilefire
