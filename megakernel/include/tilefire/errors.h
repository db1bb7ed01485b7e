#pragma once
// Errors Tilefire reports to its users.
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tilefire {

// Bad input: a missing or truncated file, a wrong config, a bad flag, a tensor of the wrong shape, a
// prompt longer than the context. The message names the file, tensor, key or flag and what was expected.
// The command line turns it into exit status 2.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Bad input of one sequence of a batch (Engine::step_sequences): its logits are not finite (its prompt
// runs the weights into an overflow), or its constraint (GenerateRequest::allowed_tokens) left nothing to
// choose. The other sequences are not at fault: a server takes this one out
// (Engine::remove_sequence) and steps the others on. `sequence` is its id from Engine::add_sequence.
struct SequenceError : InputError {
  SequenceError(uint64_t id, const std::string& what) : InputError(what), sequence(id) {}
  uint64_t sequence;
};

// A fault the GPU reported while running a step: the megakernel's watchdog (the message names the stuck
// task, its op and tile, the event, its counter and target), a trap, a failed launch. The engine that
// raised it refuses further steps.
struct DeviceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A tensor-parallel peer that died or never arrived: a collective waited longer than its timeout. The
// message names the waiting rank, the collective and the rank it waited for.
struct TransportError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace tilefire
