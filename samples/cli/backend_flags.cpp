// The backend flags, and the engine flags `run` and `serve` share (backend_flags.h).
#include "backend_flags.h"

namespace tilefire::cli {

std::vector<std::string> backend_switches() { return {"--resident", "--no-stage-weights"}; }
std::vector<std::string> backend_valued() { return {"--backend", "--ctas", "--watchdog-ms", "--step-deadline-ms", "--cuda-device", "--stress-delay-us"}; }

const char* const kBackendHelp = R"(  --backend cpu|cuda     cpu: worker threads (default); cuda: one persistent GPU kernel (bf16 weights)
  --ctas N               cuda: CTAs of the persistent grid (default: one per SM)
  --resident             cuda: the kernel stays alive across steps; each step is posted through a doorbell
  --no-stage-weights     cuda: read weights from global memory instead of shared-memory stages
  --watchdog-ms N        cuda: a device wait longer than this stops the step with an error (default 10000)
  --step-deadline-ms N   cuda: the host's bound on one step; past it the step fails and the GPU stays held
                         until the kernel ends (default 4 x --watchdog-ms or --tp-timeout-ms, at least 60000)
  --cuda-device N        cuda: which GPU (default 0)
  --stress-delay-us N    cpu, for testing: a seeded random delay of up to N microseconds before every task,
                         which reorders the workers and skews tensor-parallel ranks (at most 1000000)
)";

void apply_backend_flags(const Args& args, EngineOptions& options) {
  const std::string backend = args.text_or("--backend", "cpu");
  if (backend == "cpu") {
    options.backend = Backend::cpu;
    for (const char* flag : {"--ctas", "--watchdog-ms", "--step-deadline-ms", "--cuda-device", "--resident", "--no-stage-weights"})
      if (args.has(flag)) throw InputError(std::string(flag) + " applies to --backend cuda");
    options.stress_delay_us = uint32_t(args.unsigned_or("--stress-delay-us", 0, 1, 1000000));
    return;
  }
  if (args.has("--stress-delay-us")) throw InputError("--stress-delay-us applies to --backend cpu");
  if (backend != "cuda") throw InputError("--backend expects cpu or cuda, got '" + backend + "'");
  if (args.has("--threads")) throw InputError("--threads applies to --backend cpu (the cuda backend takes --ctas)");
  options.backend = Backend::cuda;
  options.cuda_ctas = uint32_t(args.unsigned_or("--ctas", 0, 1, 4096));
  options.cuda_watchdog_ms = uint32_t(args.unsigned_or("--watchdog-ms", 10000, 1, 3600 * 1000));
  options.cuda_step_deadline_ms = uint32_t(args.unsigned_or("--step-deadline-ms", 0, 1, 24 * 3600 * 1000));
  options.cuda_device = int(args.unsigned_or("--cuda-device", 0, 0, 63));
  options.cuda_resident = args.has("--resident");
  options.cuda_stage_weights = !args.has("--no-stage-weights");
}

void refuse_tp_timeout_alone(const Args& args, const EngineOptions& options) {
  if (args.has("--tp-timeout-ms") && options.tp == 1)
    throw InputError("--tp-timeout-ms applies to --tp N of 2 or more: one rank waits on no collective");
}

std::vector<std::string> engine_valued() {
  return {"--model", "--threads", "--tp", "--tp-timeout-ms", "--schedule", "--policy", "--granularity", "--max-context", "--kv-splits",
          "--prefill-chunk"};
}

EngineOptions engine_options_of_flags(const Args& args) {
  EngineOptions options;
  options.model_dir = args.text_or("--model", "");
  options.threads = uint32_t(args.unsigned_or("--threads", 0, 1, 256));
  options.schedule = parse_schedule(args.text_or("--schedule", "dataflow"));
  options.policy = args.text_or("--policy", "");
  options.granularity = parse_granularity(args.text_or("--granularity", "tile"));
  options.max_context = uint32_t(args.unsigned_or("--max-context", 0, 1, 1u << 24));
  options.kv_splits = uint32_t(args.unsigned_or("--kv-splits", 0, 1, 256));
  options.prefill_chunk = uint32_t(args.unsigned_or("--prefill-chunk", 128, 1, 128));
  options.tp = uint32_t(args.unsigned_or("--tp", 1, 1, 256));
  options.tp_timeout_ms = uint32_t(args.unsigned_or("--tp-timeout-ms", 10000, 1, 3600 * 1000));
  refuse_tp_timeout_alone(args, options);
  apply_backend_flags(args, options);
  return options;
}

std::string policy_help() {
  std::string text = "placement policies (--policy NAME; the first is the default):\n";
  for (const auto& [name, description] : placement_policies()) {
    text += "  " + name;
    text.append(name.size() < 16 ? 16 - name.size() : 1, ' ');
    text += description + "\n";
  }
  return text;
}

}  // namespace tilefire::cli
