#pragma once
// Every placement policy: its header, and its entry in the list (the first is the default and is listed
// first in --help). Adding a policy: a class in scheduler/policies/, and the two lines here.
#include "scheduler/policies/balanced.h"
#include "scheduler/policies/critical_path.h"
#include "scheduler/policies/dynamic_queue.h"
#include "scheduler/policies/locality.h"
#include "scheduler/policies/round_robin.h"

#define TILEFIRE_POLICY_LIST(X) \
  X(BalancedPolicy)             \
  X(RoundRobinPolicy)           \
  X(CriticalPathPolicy)         \
  X(LocalityPolicy)             \
  X(DynamicQueuePolicy)
