#include "scheduler/program.h"

namespace tilefire {

uint32_t Program::slot_index(const std::string& name) const {
  for (uint32_t i = 0; i < slots.size(); ++i)
    if (slots[i].name == name) return i;
  return kNoSlot;
}

uint64_t slot_bytes(const SlotDesc& slot) { return slot.rows * slot.cols * dtype_size(slot.dtype); }

}  // namespace tilefire
