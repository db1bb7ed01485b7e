#pragma once
// Every placement policy, one line each: X(class name, header). The first is listed first in --help.
#define TILEFIRE_POLICY_LIST(X)                                      \
  X(BalancedPolicy, "scheduler/policies/balanced.h")                 \
  X(RoundRobinPolicy, "scheduler/policies/round_robin.h")            \
  X(CriticalPathPolicy, "scheduler/policies/critical_path.h")        \
  X(LocalityPolicy, "scheduler/policies/locality.h")                 \
  X(DynamicQueuePolicy, "scheduler/policies/dynamic_queue.h")
