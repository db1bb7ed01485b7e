// The public Engine: construction (load, compile the decode program), the step API and generate().
#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>
#include <thread>

#include <unistd.h>

#include "graph/tensor_parallel.h"
#include "megakernel/cuda/device_job.h"
#include "megakernel/engine_impl.h"
#include "megakernel/speculation.h"
#include "megakernel/tool_spec.h"
#include "ops/sampling.h"
#include "ops/splitmix64.h"
#include "scheduler/policy.h"

namespace tilefire {

namespace {

const char* architecture_name(Architecture arch) {
  switch (arch) {
    case Architecture::llama: return "LlamaForCausalLM";
    case Architecture::mistral: return "MistralForCausalLM";
    case Architecture::qwen2: return "Qwen2ForCausalLM";
    case Architecture::qwen3: return "Qwen3ForCausalLM";
    case Architecture::phi3: return "Phi3ForCausalLM";
    case Architecture::smollm3: return "SmolLM3ForCausalLM";
    case Architecture::granite: return "GraniteForCausalLM";
    case Architecture::gemma3: return "Gemma3ForCausalLM";
    case Architecture::gemma2: return "Gemma2ForCausalLM";
    case Architecture::gemma: return "GemmaForCausalLM";
  }
  return "?";
}

uint64_t decode_weight_bytes(const Program& program, const ModelSpec& spec) {
  uint64_t bytes = 0;
  for (const SlotDesc& slot : program.slots) {
    if (slot.kind != SlotKind::weight && slot.kind != SlotKind::weight_f32) continue;
    if (slot.name == "model.embed_tokens.weight" && !spec.tie_embeddings)
      bytes += uint64_t(spec.hidden) * dtype_size(slot.dtype);  // one row is gathered
    else
      bytes += slot_bytes(slot);
  }
  return bytes;
}

// A preset's shape with random weights built in memory (benchmarks without writing a folder first).
LoadedModel random_preset_model(const std::string& preset, const std::string& dtype, uint64_t seed) {
  std::optional<DType> parsed = parse_dtype(dtype);
  if (!parsed) throw InputError("EngineOptions::preset_dtype (--dtype) must be f32, bf16 or f16, got '" + dtype + "'");
  LoadedModel model;
  model.spec = preset_spec(preset, *parsed);
  RandomWeightOptions options;
  options.dtype = *parsed;
  options.seed = seed;
  model.origin = "preset " + preset + " (" + dtype + ", seed " + std::to_string(seed) + ")";
  model.weights = WeightStore::from_file(SafetensorsFile::from_bytes(random_safetensors_image(model.spec, options), model.origin));
  check_weights_against_spec(model.spec, model.weights, model.origin);
  return model;
}

// The cuda backend: a model whose weights and KV caches cannot fit in a GPU's free memory is refused
// before anything is uploaded, saying what to lower (a cudaMalloc failing half way through the weights is
// a device error, as if the GPU had failed). Weights (bf16 on the device) and caches are counted as the
// ranks on each GPU hold them and the activations not at all, so a refusal is never wrong; a model that
// passes with too little room for its activations still fails at the allocation, naming it.
void check_fits_on_gpus(const ModelSpec& spec, uint32_t tp, uint32_t max_context, uint32_t sequences,
                        const std::vector<std::pair<uint32_t, const CudaExecutor*>>& ranks) {
  ModelSpec on_device = spec;
  on_device.dtype = DType::bf16;
  const TensorParallelSplit split = split_tensor_parallel(spec, tp);
  std::map<int, std::pair<uint64_t, uint64_t>> needs;  // by device: weight bytes, KV bytes
  std::map<int, const CudaExecutor*> executor_of;
  for (const auto& [rank, executor] : ranks) {
    const RankMemory memory = rank_memory(on_device, split.ranks.at(rank), max_context, sequences, tp);  // no rings on the device
    const int device = executor->options().device;
    needs[device].first += memory.weight_bytes;
    needs[device].second += memory.kv_cache_bytes;
    executor_of[device] = executor;
  }
  for (const auto& [device, bytes] : needs) {
    const uint64_t free = executor_of[device]->free_memory_bytes();
    if (bytes.first + bytes.second <= free) continue;
    throw InputError("--backend cuda: GPU " + std::to_string(device) + " (" + executor_of[device]->device_name() + ") has " + readable_bytes(free) +
                     " free, and " + (tp > 1 ? "its ranks' " : std::string("the model's ")) + "weights take " + readable_bytes(bytes.first) +
                     " (bf16) and the KV cache " + readable_bytes(bytes.second) + " (K and V of " + std::to_string(spec.layers) + " layers, " +
                     std::to_string(max_context) + " positions, " + std::to_string(sequences) +
                     " sequence(s), f32): lower EngineOptions::max_context (--max-context) or sequences" +
                     (tp > 1 ? "" : ", or split the model over GPUs (--tp)"));
  }
}

}  // namespace

std::unique_ptr<Engine::Impl> Engine::Impl::make_rank(uint32_t rank_index, const RankView& view) const {
  auto r = std::make_unique<Impl>();
  r->options = options;
  r->schedule = options.schedule;
  r->max_context = max_context;
  r->program_spec = program_spec;
  r->tp = options.tp;
  r->rank = rank_index;
  r->parent_model = &model;
  r->rank_view = view;
  r->info.vocab = model.spec.vocab;
  r->written_end.assign(options.sequences, 0);
  return r;
}

uint64_t Engine::Impl::process_rank_key(const Bootstrap& boot, const std::string& backend_workers) const {
  const ModelSpec& spec = model.spec;
  if (boot.ranks != options.tp)
    throw InputError("EngineOptions::tp (--tp) is " + std::to_string(options.tp) + ", but " + std::to_string(boot.ranks) + " ranks were started (" +
                     boot.source + ")");
  // Everything a rank's programs follow from: a peer that differs in any of it is refused when the group
  // forms (its programs would place different tasks at the same flag slots).
  const std::string key = model.origin + "|" + to_hf_config_json(spec) + "|" + backend_workers + "|" + options.policy + "|" +
                          std::to_string(int(options.granularity)) + "|" + std::to_string(options.kv_splits) + "|" +
                          std::to_string(max_context) + "|" + std::to_string(options.tp);
  return std::hash<std::string>{}(key);
}

Engine::Engine(const EngineOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.options = options;
  m.schedule = options.schedule;
  // What the command line checks for its flags, checked here for API users too (an option the engine
  // would ignore, or a value it cannot run, is refused: the result would not be what was asked for).
  if (options.backend != Backend::cpu && options.backend != Backend::cuda) throw InputError("EngineOptions::backend is not cpu or cuda");
  if (options.schedule != Schedule::dataflow && options.schedule != Schedule::bsp)
    throw InputError("EngineOptions::schedule is not dataflow or bsp");
  if (options.granularity != Granularity::tile && options.granularity != Granularity::head && options.granularity != Granularity::op)
    throw InputError("EngineOptions::granularity is not tile, head or op");
  if (!options.model_dir.empty() && !options.preset.empty())
    throw InputError("EngineOptions: give model_dir or preset, not both (a checkpoint, or a preset's random weights)");
  if (options.preset.empty() && (options.preset_dtype != EngineOptions{}.preset_dtype || options.preset_seed != 0))
    throw InputError("EngineOptions::preset_dtype and preset_seed apply to a preset (--preset): a checkpoint folder and the "
                     "built-in sample have their own weights");
  if (options.kv_splits > 256)
    throw InputError("EngineOptions::kv_splits (--kv-splits) " + std::to_string(options.kv_splits) + " is more than 256");
  if (options.tp_timeout_ms == 0) throw InputError("EngineOptions::tp_timeout_ms (--tp-timeout-ms) must be at least 1");
  check_draft_options(options, options.tp > 1 && launched_as_one_of_several_ranks());  // before anything loads
  if (options.sequences == 0 || options.sequences > 256)
    throw InputError("EngineOptions::sequences must be 1 to 256, got " + std::to_string(options.sequences));
  m.slot_tokens.assign(options.sequences, {});
  m.written_end.assign(options.sequences, 0);
  if (options.prefill_chunk == 0 || options.prefill_chunk > Impl::kMaxPrefillChunk)
    throw InputError("EngineOptions::prefill_chunk (--prefill-chunk) must be 1 to " + std::to_string(Impl::kMaxPrefillChunk) +
                     " prompt tokens, got " + std::to_string(options.prefill_chunk));
  // A testing delay before every task: past a second, a step of hundreds of tasks would seem to hang.
  if (options.stress_delay_us > 1000000)
    throw InputError("EngineOptions::stress_delay_us " + std::to_string(options.stress_delay_us) + " is more than 1000000 (1 s)");
  if (options.backend == Backend::cpu) {
    const EngineOptions defaults;
    if (options.cuda_device != defaults.cuda_device || options.cuda_ctas != defaults.cuda_ctas ||
        options.cuda_resident != defaults.cuda_resident || options.cuda_stage_weights != defaults.cuda_stage_weights ||
        options.cuda_watchdog_ms != defaults.cuda_watchdog_ms || options.cuda_step_deadline_ms != defaults.cuda_step_deadline_ms)
      throw InputError("EngineOptions::cuda_device, cuda_ctas, cuda_resident, cuda_stage_weights, cuda_watchdog_ms and "
                       "cuda_step_deadline_ms apply to "
                       "the cuda backend (--backend cuda); this engine is on the cpu");
  }
  if (options.tp == 1) {
    // A launcher's ranks with one tensor-parallel rank: each process would load and run the whole model
    // on its own, and each would print its own output. Variables another launcher left half set (RANK
    // without TILEFIRE_RENDEZVOUS) are not ours, and one rank runs as before.
    std::optional<Bootstrap> boot;
    try {
      boot = bootstrap_from_environment();
    } catch (const InputError&) {
    }
    if (boot && boot->ranks > 1)
      throw InputError("EngineOptions::tp (--tp) is 1, but " + std::to_string(boot->ranks) + " ranks were started (" + boot->source +
                       "): each process would run the whole model alone; give --tp " + std::to_string(boot->ranks) +
                       " to split the model across them");
  }
  if (!options.model_dir.empty()) {
    m.model = load_hf_model(options.model_dir);
  } else if (!options.preset.empty()) {
    m.model = random_preset_model(options.preset, options.preset_dtype, options.preset_seed);
  } else {
    m.model = builtin_sample_model();
  }
  const ModelSpec& spec = m.model.spec;
  m.max_context = options.max_context ? options.max_context : std::min(spec.max_context, 4096u);
  if (m.max_context > spec.max_context)
    throw InputError("EngineOptions::max_context (--max-context) " + std::to_string(m.max_context) + " exceeds the model's limit of " +
                     std::to_string(spec.max_context) + " (max_position_embeddings in config.json)");
  if (options.kv_splits > m.max_context)
    throw InputError("EngineOptions::kv_splits (--kv-splits) " + std::to_string(options.kv_splits) + " is more than the context of " +
                     std::to_string(m.max_context) + " positions: the chunks past it would never hold a position");
  if (options.tp == 0) throw InputError("EngineOptions::tp (--tp) must be at least 1");
  if (options.backend == Backend::cpu) {
    // The KV caches are allocated in full when the first program binds, their pages committed as the
    // sequences write them: past the machine's memory, the sequences reaching their contexts would end
    // in the kernel killing the process, not in a message. Every rank's caches are on this host (ranks
    // as threads of this process, or as processes beside it), and a KV head replicated over ranks is
    // held once per rank that keeps a copy.
    uint64_t kv_bytes = 0;
    for (const RankShard& shard : split_tensor_parallel(spec, options.tp).ranks)  // refuses a degree the shapes do not allow
      kv_bytes += rank_memory(spec, shard, m.max_context, options.sequences, options.tp, options.prefill_chunk).kv_cache_bytes;
    // A draft model's cache lives beside these, on this host too, and its own engine checks it alone.
    const uint64_t draft_bytes = draft_kv_cache_bytes(options, m.max_context);
    const double memory = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    if (memory > 0 && double(kv_bytes + draft_bytes) > memory)
      throw InputError("the KV cache would take " + std::to_string((kv_bytes + draft_bytes) >> 30) + " GiB (K and V of " +
                       std::to_string(spec.layers) + " layers, " + std::to_string(m.max_context) + " positions, " +
                       std::to_string(options.sequences) + " sequence(s), f32" +
                       (options.tp > 1 ? ", over the " + std::to_string(options.tp) + " ranks on this host" : std::string()) +
                       (draft_bytes ? ", and the draft model's " + std::to_string(draft_bytes >> 30) + " GiB beside it" : std::string()) +
                       "), more than this machine's " + std::to_string(uint64_t(memory / double(1ull << 30))) +
                       " GiB of memory: lower EngineOptions::max_context (--max-context) or sequences" +
                       (draft_bytes ? std::string(", or draft by prompt lookup (--speculate without --draft-model)") : std::string()));
  }
  if (!options.policy.empty() && !find_policy(options.policy))
    throw InputError("EngineOptions::policy (--policy): unknown placement policy '" + options.policy + "' (expected one of " + policy_names() + ")");
  m.program_spec = spec;
  if (options.tp > 1 && options.policy == "dynamic")
    throw InputError("--policy dynamic cannot run with --tp: each rank's ready queue would order its collective "
                     "tasks differently, and ranks waiting on each other's different tasks could deadlock; use a "
                     "static policy (docs/TENSOR_PARALLEL.md)");
  if (options.tp > 1) split_tensor_parallel(spec, options.tp);  // refuses a degree the shapes do not allow, saying why
  // Tensor parallelism: the window each rank's collectives use (two partial-sum slices per layer for the
  // widest step, widest_step_rows, and the rank's share of the logits of as many rows: a row per
  // sequence, or per prompt token when a prompt is scored) and its flags (at most one per column of each
  // collective node, one per rank's logits, two for the program digests and two barriers).
  const uint64_t widest_step = widest_step_rows(options);
  const uint64_t window_bytes =
      2ull * spec.layers * ((widest_step * spec.hidden * 4 + 63) / 64 * 64) +
      (widest_step * ((uint64_t(spec.vocab) + options.tp - 1) / options.tp) * 4 + 63) / 64 * 64;
  const uint32_t flags = 2 * spec.layers * spec.hidden + options.tp + 4;
  if (options.backend == Backend::cuda) {
    if (options.stress_delay_us) throw InputError("EngineOptions::stress_delay_us (--stress-delay-us) applies to the cpu backend only");
    // A step's tokens (a decode token of each sequence, or a prefill chunk) reach the kernel in a block of
    // kMailboxTokens; a batched step of more sequences would fail at its first step.
    if (options.sequences > kMailboxTokens)
      throw InputError("EngineOptions::sequences " + std::to_string(options.sequences) + " on the cuda backend: at most " +
                       std::to_string(kMailboxTokens) + " (a step's tokens, one per sequence, are posted to the kernel in a block of that many)");
    CudaOptions cuda;
    cuda.device = options.cuda_device;
    cuda.ctas = options.cuda_ctas;
    cuda.resident = options.cuda_resident;
    cuda.stage_weights = options.cuda_stage_weights;
    cuda.watchdog_ms = options.cuda_watchdog_ms;
    cuda.step_deadline_ms = options.cuda_step_deadline_ms;
    m.program_spec.dtype = DType::bf16;  // the device ops read bf16 weights (docs/CUDA.md)
    if (options.tp > 1) {
      // Ranks of this process, rank r on GPU (--cuda-device + r) mod the visible GPUs, ranks that share a
      // GPU splitting its SMs; or one rank per process (mpirun, or RANK and WORLD_SIZE) over NCCL.
      if (options.cuda_resident)
        throw InputError("--resident cannot run with --tp yet: each rank's kernel is launched per step (docs/TENSOR_PARALLEL.md)");
      const std::optional<Bootstrap> boot = bootstrap_from_environment();
      if (boot && !NcclWindowGroup::built())
        throw InputError("--tp with --backend cuda and one rank per process (mpirun, or RANK and WORLD_SIZE) needs NCCL 2.28 "
                         "with its device API, which this build does not have; without a launcher, --tp runs the ranks "
                         "in one process");
      if (options.tp > CudaExecutor::kMaxRanks)
        throw InputError("EngineOptions::tp (--tp) " + std::to_string(options.tp) + " on the cuda backend: at most " + std::to_string(CudaExecutor::kMaxRanks) +
                         " ranks");
      const int visible = CudaExecutor::device_count();
      if (visible == 0 || options.cuda_device < 0 || options.cuda_device >= visible)
        throw InputError("--backend cuda: " + CudaExecutor::unavailable_reason(options.cuda_device));
      m.tp = options.tp;
      if (boot) {
        // One GPU per rank (NCCL refuses two ranks on one GPU). The host group carries the NCCL id and
        // the barriers between steps; the NCCL window carries the collectives.
        CudaOptions rank_cuda = cuda;
        rank_cuda.device = int((uint32_t(options.cuda_device) + boot->rank) % uint32_t(visible));
        auto executor = std::make_unique<CudaExecutor>(rank_cuda);
        const uint64_t key = m.process_rank_key(*boot, "cuda|" + executor->device_name() + "|" + std::to_string(executor->workers()));
        constexpr uint32_t kIdFlag = 0;
        m.setup_barrier_flag = 1;
        m.step_barrier_flag = 2;
        m.digest_flag = 3;  // and 4
        m.process_group = std::make_unique<SharedMemoryGroup>(*boot, 4096, 5, options.tp_timeout_ms, key);
        m.nccl_group = std::make_unique<NcclWindowGroup>(
            m.process_group->view(), kIdFlag, rank_cuda.device, window_bytes, flags, options.tp_timeout_ms,
            std::max(options.tp_timeout_ms, NcclWindowGroup::kMinSetupTimeoutMs));
        std::unique_ptr<Impl> rank = m.make_rank(boot->rank, m.nccl_group->view());
        rank->cuda = std::move(executor);
        rank->cuda->set_rank_view(rank->rank_view);
        m.rank_engines.push_back(std::move(rank));
      } else {
        std::vector<int> devices;
        for (uint32_t r = 0; r < options.tp; ++r) devices.push_back(int((uint32_t(options.cuda_device) + r) % uint32_t(visible)));
        // Every rank gets the share of the most crowded GPU, so all ranks have the same CTA count and
        // their programs place the same tasks (check_ranks_agree).
        uint32_t share = 1;
        for (int d : devices) share = std::max(share, uint32_t(std::count(devices.begin(), devices.end(), d)));
        // Zeroing the windows synchronizes their GPUs, which a resident kernel (another engine's) or a kernel
        // the host gave up on would hold for ever.
        for (int d : devices) CudaExecutor::prepare_for_allocation(d);
        m.device_group = std::make_unique<DeviceWindowGroup>(devices, window_bytes, flags, options.tp_timeout_ms,
                                                             &CudaExecutor::keep_if_group_held);
        for (uint32_t r = 0; r < options.tp; ++r) {
          std::unique_ptr<Impl> rank = m.make_rank(r, m.device_group->view(r));
          CudaOptions rank_cuda = cuda;
          rank_cuda.device = devices[r];
          rank_cuda.sm_share = share;
          rank->cuda = std::make_unique<CudaExecutor>(rank_cuda);
          rank->cuda->set_rank_view(rank->rank_view);
          m.rank_engines.push_back(std::move(rank));
        }
      }
    } else {
      m.cuda = std::make_unique<CudaExecutor>(cuda);
    }
    std::vector<std::pair<uint32_t, const CudaExecutor*>> ranks;
    if (m.cuda) ranks.emplace_back(0, m.cuda.get());
    for (const auto& rank : m.rank_engines) ranks.emplace_back(rank->rank, rank->cuda.get());
    check_fits_on_gpus(spec, options.tp, m.max_context, options.sequences, ranks);
  } else {
    const uint32_t threads = options.threads ? options.threads : usable_cores();
    if (threads > 256) throw InputError("EngineOptions::threads (--threads) " + std::to_string(threads) + " is more than 256");
    if (options.tp > 1) {
      // One engine per rank on its share of the threads; the parent keeps the group and runs no program.
      // Ranks as processes: this process holds its own rank only, and meets the others in shared memory.
      const std::optional<Bootstrap> boot = bootstrap_from_environment();
      m.tp = options.tp;
      m.step_barrier_flag = flags - 1;
      m.setup_barrier_flag = flags - 2;
      m.digest_flag = flags - 4;  // and flags - 3
      // Ranks as processes: this process's share of the cores (every rank computes the same share, so
      // their programs, placed for that many workers, agree).
      const uint32_t rank_threads = options.threads ? threads : (boot ? std::max(1u, threads / options.tp) : threads);
      std::vector<uint32_t> local_ranks;
      if (boot) {
        const uint64_t key = m.process_rank_key(*boot, "cpu|" + std::to_string(rank_threads));
        m.process_group = std::make_unique<SharedMemoryGroup>(*boot, window_bytes, flags, options.tp_timeout_ms, key);
        local_ranks.push_back(boot->rank);
      } else {
        m.group = std::make_unique<InProcessGroup>(options.tp, window_bytes, flags, options.tp_timeout_ms);
        for (uint32_t r = 0; r < options.tp; ++r) local_ranks.push_back(r);
      }
      for (uint32_t r : local_ranks) {
        std::unique_ptr<Impl> rank = m.make_rank(r, m.process_group ? m.process_group->view() : m.group->view(r));
        const uint32_t workers = m.process_group ? rank_threads : std::max(1u, threads / options.tp);
        // Ranks of one process on disjoint CPUs; a process rank after its lower-numbered peers' CPUs.
        rank->executor = std::make_unique<CpuExecutor>(workers, r * workers);
        m.rank_engines.push_back(std::move(rank));
      }
    } else {
      m.executor = std::make_unique<CpuExecutor>(threads);
    }
  }

  auto start = std::chrono::steady_clock::now();
  if (m.rank_engines.empty()) {
    Program decode = compile_model(m.program_spec, m.compile_options(1));
    m.decode_program = m.bind(std::move(decode), ms_since(start));
  } else {
    m.on_every_rank([&](Impl& r, uint32_t) {
      auto rank_start = std::chrono::steady_clock::now();
      Program decode = compile_model(r.program_spec, r.compile_options(1));
      r.decode_program = r.bind(std::move(decode), ms_since(rank_start));
    });
    for (uint32_t r = 1; r < m.rank_engines.size(); ++r)
      m.check_ranks_agree(m.rank_engines[0]->decode_program->program, 0, m.rank_engines[r]->decode_program->program, r);
    m.setup_barrier(m.rank_engines[0]->decode_program->program);  // ranks as processes: loading and compiling is not counted against a collective's timeout
  }

  ModelInfo& info = m.info;
  info.origin = m.model.origin;
  info.architecture = spec.arch_name.empty() ? architecture_name(spec.arch) : spec.arch_name;
  info.dtype = std::string(dtype_name(spec.dtype));
  info.vocab = spec.vocab;
  info.hidden = spec.hidden;
  info.layers = spec.layers;
  info.heads = spec.heads;
  info.kv_heads = spec.kv_heads;
  info.head_dim = spec.head_dim;
  info.ffn = spec.ffn;
  info.max_context = m.max_context;
  info.sliding_window = spec.sliding_window;
  info.sliding_layers = uint32_t(std::count(spec.sliding_layers.begin(), spec.sliding_layers.end(), true));
  info.eos_tokens = spec.eos_tokens;
  // The whole model's bytes per step (every rank's share together under tensor parallelism).
  info.decode_weight_bytes = m.rank_engines.empty() ? decode_weight_bytes(m.decode_program->program, spec)
                                                    : decode_weight_bytes(compile_model(spec, CompileOptions{}), spec);
  m.draft_engine = make_draft_engine(options, info);  // none unless asked for
}

Engine::~Engine() {
  try {
    if (impl_ && impl_->cuda) impl_->cuda->stop_resident_kernel();  // before any device memory is freed
  } catch (const std::exception&) {
    // The kernel failed, or outlived the step deadline: then the GPU stays held, and the device memory
    // freed below is kept until the kernel ends (docs/CUDA.md, "The host's deadline").
  }
}

const ModelInfo& Engine::model() const { return impl_->info; }
uint32_t Engine::threads() const {
  uint32_t workers = 0;
  for (const auto& rank : impl_->rank_engines) workers += rank->workers();
  return impl_->rank_engines.empty() ? impl_->workers() : workers;
}
uint32_t Engine::tensor_parallel_ranks() const { return impl_->tp; }
uint32_t Engine::tensor_parallel_rank() const { return impl_->process_group ? impl_->rank_engines[0]->rank : 0; }
bool Engine::ranks_are_processes() const { return impl_->process_group != nullptr; }
bool launched_as_one_of_several_ranks() {
  const std::optional<Bootstrap> boot = bootstrap_from_environment();
  return boot && boot->ranks > 1;
}
std::string Engine::device_name() const {
  const CudaExecutor* cuda = impl_->first_cuda_executor();
  return cuda ? cuda->device_name() : "cpu";
}
uint64_t Engine::kernel_launches() const {  // under tensor parallelism: rank 0's (every rank launches alike)
  const CudaExecutor* cuda = impl_->first_cuda_executor();
  return cuda ? cuda->launches() : 0;
}
// generate() runs its steps around the on_token callback; a call into the engine from there would move
// the sequence under it and its later steps would run on the wrong context, with nothing to show it.
void refuse_while_generating(const Engine::Impl& m, const char* call) {
  if (m.generating)
    throw InputError(std::string("Engine::") + call + " was called while Engine::generate runs (from GenerateRequest::on_token): "
                     "an engine takes one call at a time");
}

void Engine::reset() {
  refuse_while_generating(*impl_, "reset");
  refuse_while_batching(*impl_, "reset");
  impl_->rewind(0);
}
void Engine::rewind(uint32_t position) {
  refuse_while_generating(*impl_, "rewind");
  refuse_while_batching(*impl_, "rewind");
  if (position > impl_->position)
    throw InputError("rewind: position " + std::to_string(position) + " is past the sequence's " + std::to_string(impl_->position) + " tokens");
  if (!impl_->rings_hold(0, position))
    throw InputError("rewind: position " + std::to_string(position) + " is gone from the sliding-window layers' caches, which keep " +
                     "the last positions only (a ring of " + std::to_string(impl_->rings_of_rank0().front().rows) +
                     " for a window of " + std::to_string(impl_->rings_of_rank0().front().window) +
                     "): rewind to 0 and prefill again (Engine::can_rewind says which positions are held)");
  impl_->rewind(position);
}
bool Engine::can_rewind(uint32_t position) const {
  return !impl_->generating && impl_->batched.empty() && position <= impl_->position && impl_->rings_hold(0, position);
}
uint32_t Engine::position() const { return impl_->position; }
const std::vector<int32_t>& Engine::sequence() const { return impl_->sequence; }
void Engine::set_schedule(Schedule schedule) {
  refuse_while_generating(*impl_, "set_schedule");
  if (schedule != Schedule::dataflow && schedule != Schedule::bsp) throw InputError("set_schedule: not dataflow or bsp");
  impl_->schedule = schedule;
  for (auto& rank : impl_->rank_engines) rank->schedule = schedule;
  if (impl_->draft_engine) impl_->draft_engine->set_schedule(schedule);
}
uint32_t Engine::decode_tasks() const { return uint32_t(impl_->decode_program_of_rank0().program.tasks.size()); }
uint32_t Engine::decode_events() const { return uint32_t(impl_->decode_program_of_rank0().program.events.size()); }

uint64_t Engine::decode_kv_bytes(uint32_t visible) const {
  const ModelSpec& spec = impl_->model.spec;
  uint64_t positions = 0;  // over the layers
  for (uint32_t l = 0; l < spec.layers; ++l) {
    const uint32_t window = spec.attention_window(l);
    positions += window != 0 ? std::min(window, visible) : visible;
  }
  return 2ull * spec.kv_dim() * sizeof(float) * positions;
}

namespace {
// The step's logits, checked: NaN or Inf is an InputError that leaves the sequence where it began.
std::vector<float> finite_logits(Engine::Impl& m, const float* logits, uint32_t began) {
  try {
    m.check_finite_logits(logits, m.position - 1);
  } catch (const InputError&) {
    m.rewind_after_failure(began);
    throw;
  }
  return std::vector<float>(logits, logits + m.info.vocab);
}
}  // namespace

std::vector<float> Engine::prefill(const std::vector<int32_t>& tokens) {
  refuse_while_generating(*impl_, "prefill");
  refuse_while_batching(*impl_, "prefill");
  const uint32_t began = impl_->position;
  double compile_ms = 0;
  const float* logits = nullptr;
  try {
    logits = impl_->prefill(tokens, &compile_ms);
  } catch (const InputError&) {  // a later chunk refused (its program, say) after earlier chunks ran
    impl_->rewind_after_failure(began);
    throw;
  }
  return finite_logits(*impl_, logits, began);
}

std::vector<float> Engine::decode(int32_t token) {
  refuse_while_generating(*impl_, "decode");
  refuse_while_batching(*impl_, "decode");
  impl_->check_tokens({token});
  const uint32_t began = impl_->position;
  const float* logits = impl_->decode_step(token, nullptr);
  return finite_logits(*impl_, logits, began);
}

int32_t Engine::decode_greedy(int32_t token) {
  refuse_while_generating(*impl_, "decode_greedy");
  refuse_while_batching(*impl_, "decode_greedy");
  impl_->check_tokens({token});
  return impl_->decode_greedy_step(token);
}

void Engine::Impl::check_request(const GenerateRequest& request) const {
  if (request.prompt.empty()) throw InputError("GenerateRequest::prompt is empty (--prompt or --prompt-tokens)");
  if (request.prompt.size() > max_context)
    throw InputError("the prompt has " + std::to_string(request.prompt.size()) + " tokens but the context holds " +
                     std::to_string(max_context));
  // The command line's ranges (--temperature 0 to 100, --top-p above 0 up to 1); NaN fails both.
  const Sampling& s = request.sampling;
  if (!(s.temperature >= 0.0f && s.temperature <= 100.0f))
    throw InputError("Sampling::temperature (--temperature) must be from 0 (greedy) to 100, got " + std::to_string(s.temperature));
  if (!(s.top_p > 0.0f && s.top_p <= 1.0f))
    throw InputError("Sampling::top_p (--top-p) must be above 0 and at most 1 (1: off), got " + std::to_string(s.top_p));
  if (!(s.min_p >= 0.0f && s.min_p <= 1.0f))
    throw InputError("Sampling::min_p (--min-p) must be from 0 (off) to 1, got " + std::to_string(s.min_p));
  if (!(s.repetition_penalty > 0.0f && s.repetition_penalty <= 100.0f))
    throw InputError("Sampling::repetition_penalty (--repetition-penalty) must be above 0 and at most 100 (1: off), got " +
                     std::to_string(s.repetition_penalty));
  if (!(s.presence_penalty >= -2.0f && s.presence_penalty <= 2.0f))
    throw InputError("Sampling::presence_penalty (--presence-penalty) must be from -2 to 2, got " + std::to_string(s.presence_penalty));
  if (!(s.frequency_penalty >= -2.0f && s.frequency_penalty <= 2.0f))
    throw InputError("Sampling::frequency_penalty (--frequency-penalty) must be from -2 to 2, got " + std::to_string(s.frequency_penalty));
  for (const auto& [token, bias] : s.logit_bias) {
    if (token < 0 || uint32_t(token) >= info.vocab)
      throw InputError("Sampling::logit_bias (--logit-bias) names token " + std::to_string(token) + ", outside the vocabulary of " +
                       std::to_string(info.vocab));
    if (!(bias >= -100.0f && bias <= 100.0f))
      throw InputError("Sampling::logit_bias (--logit-bias) gives token " + std::to_string(token) + " a bias of " + std::to_string(bias) +
                       ": it must be from -100 to 100");
  }
  if (request.on_probabilities && request.logprobs == 0)
    throw InputError("GenerateRequest::on_probabilities is set but logprobs is 0: ask for logprobs K (1 at least) to have "
                     "each token's probabilities");
  if (request.min_new_tokens > request.max_new_tokens)
    throw InputError("GenerateRequest::min_new_tokens (--min-new-tokens) " + std::to_string(request.min_new_tokens) +
                     " is more than max_new_tokens " + std::to_string(request.max_new_tokens));
  if (request.prompt_logprobs > info.vocab)
    throw InputError("GenerateRequest::prompt_logprobs (--prompt-logprobs) " + std::to_string(request.prompt_logprobs) +
                     " exceeds the vocabulary of " + std::to_string(info.vocab));
  if (request.logprobs > info.vocab)
    throw InputError("GenerateRequest::logprobs (--logprobs) " + std::to_string(request.logprobs) + " exceeds the vocabulary of " +
                     std::to_string(info.vocab));
  check_vocabulary(request.prompt);  // the context is checked above: the request starts a new sequence
  for (int32_t token : request.stop_tokens)  // one that can never be generated would never stop anything
    if (token < 0 || uint32_t(token) >= info.vocab)
      throw InputError("GenerateRequest::stop_tokens holds " + std::to_string(token) + ", outside the vocabulary of " +
                       std::to_string(info.vocab) + " tokens (the command line's stop tokens: generation_config.json's "
                       "eos_token_id and the chat template's eos_token)");
}

std::vector<int32_t> Engine::Impl::ending_tokens(const GenerateRequest& request) const {
  return request.ending_tokens(info.eos_tokens);
}

bool Engine::Impl::ends_request(const GenerateRequest& request, int32_t token) const {
  return (request.stop_at_eos && std::find(info.eos_tokens.begin(), info.eos_tokens.end(), token) != info.eos_tokens.end()) ||
         std::find(request.stop_tokens.begin(), request.stop_tokens.end(), token) != request.stop_tokens.end();
}

GenerateResult Engine::generate(const GenerateRequest& request) {
  Impl& m = *impl_;
  refuse_while_generating(m, "generate");
  refuse_while_batching(m, "generate");
  GeneratingScope generating_scope(m);
  GenerateResult result;
  result.prompt_tokens = request.prompt;
  result.tasks_per_step = decode_tasks();
  result.events_per_step = decode_events();
  m.check_request(request);
  UniformGenerator uniform(request.sampling.seed);
  TokenCounts counts(request.prompt);
  const std::vector<int32_t> ending = m.ending_tokens(request);

  // The token chosen from the logits after the token at `at` (by default the last fed).
  auto pick = [&](const float* logits, std::optional<uint32_t> at = std::nullopt) {
    m.check_finite_logits(logits, at.value_or(m.position - 1));  // NaN or Inf would be sampled, or reported, as if real
    const bool too_few = result.tokens.size() < request.min_new_tokens;
    const int32_t token = choose_token(logits, m.info.vocab, request, result.tokens, counts, uniform.next(),
                                       too_few ? ending : std::vector<int32_t>{});
    if (request.logprobs) record_probabilities(result, logits, m.info.vocab, request.logprobs, token);
    result.tokens.push_back(token);
    return token;
  };
  auto is_eos = [&](int32_t token) { return m.ends_request(request, token); };

  // Ranks as processes all record (they run the same steps) but only rank 0 writes the file.
  const bool writes_trace = m.writes_files();
  check_speculation(request.speculation, m.options.prefill_chunk, m.draft_engine != nullptr);
  if (!request.trace_path.empty()) {
    if (request.max_new_tokens == 0) throw InputError("--trace records a decode step: give --max-new-tokens 1 or more");
    if (request.speculation.draft_tokens)
      throw InputError("--trace records a decode step, and with --speculate (GenerateRequest::speculation) the steps check "
                       "drafts instead: give one of them");
    if (request.prompt.size() + 1 > m.max_context)
      throw InputError("--trace records a decode step, but the prompt of " + std::to_string(request.prompt.size()) +
                       " tokens leaves no room for one in the context of " + std::to_string(m.max_context));
    if (writes_trace) {
      std::ofstream probe(request.trace_path);  // fail before generating, not after
      if (!probe) throw InputError("--trace: cannot write '" + request.trace_path + "'");
    }
  }
  // Only once the request is known to be good: a refused one leaves the sequence as it was. With
  // reuse_prefix the cache keeps the tokens that begin the prompt, all but its last (whose logits the
  // first new token needs).
  result.compile_ms = m.decode_program_of_rank0().compile_ms;
  if (request.max_new_tokens == 0 && request.prompt_logprobs == 0) {  // nothing to do: the sequence stays as it was
    result.finish_reason = "length";
    return result;
  }
  uint32_t kept = 0;
  if (request.reuse_prefix && request.prompt_logprobs == 0)  // scoring the prompt needs every position's logits
    while (kept < m.sequence.size() && kept + 1 < request.prompt.size() && m.sequence[kept] == request.prompt[kept]) ++kept;
  if (!m.rings_hold(0, kept)) kept = 0;  // a sliding window's ring has moved past what the prefix needs
  m.rewind(kept);
  result.reused_tokens = kept;
  // A step whose logits are NaN or Inf throws; the sequence goes back to where that step began.
  auto checked_step = [&](auto&& run_step) {
    const uint32_t began = m.position;
    try {
      return run_step();
    } catch (const InputError&) {
      m.rewind_after_failure(began);  // a whole prompt's prefill may have gone round a ring
      throw;
    }
  };
  auto start = std::chrono::steady_clock::now();
  double prefill_compile_ms = 0;
  const Engine::Impl::PromptProbabilities prompt_scores{request.prompt_logprobs, &result};
  const Engine::Impl::PromptProbabilities* scoring = request.prompt_logprobs ? &prompt_scores : nullptr;
  if (request.max_new_tokens == 0) {  // the prompt scored, nothing generated
    checked_step([&] { return m.prefill(request.prompt, &prefill_compile_ms, scoring); });
    result.compile_ms += prefill_compile_ms;
    result.ttft_ms = ms_since(start) - prefill_compile_ms;  // the prefill, as a batch's scored sequence counts it
    result.finish_reason = "length";
    return result;
  }
  int32_t token = checked_step([&] {
    return pick(m.prefill(std::vector<int32_t>(request.prompt.begin() + kept, request.prompt.end()), &prefill_compile_ms, scoring));
  });
  const Speculation& speculation = request.speculation;
  std::vector<int32_t> history;  // speculation: the prompt and the reply so far, where drafts come from
  if (speculation.draft_tokens) {
    history = request.prompt;
    history.push_back(token);
    // A draft model reads the prompt now, as part of the time to the first token (its compiling too).
    if (speculation.source == DraftSource::draft_model && request.max_new_tokens > 1)
      next_draft(speculation, m.draft_engine.get(), history, 1, m.info.vocab, &result.draft_error);
  }
  result.compile_ms += prefill_compile_ms;
  result.ttft_ms = ms_since(start) - prefill_compile_ms;
  // The caller's callbacks after each token: on_token shows it, stop_when may end the generation there.
  bool stopped = false;
  auto deliver = [&](int32_t generated) {
    if (request.logprobs && request.on_probabilities) request.on_probabilities(result.token_probabilities.back(), result.logprobs.back());
    if (request.on_token) request.on_token(generated);
    if (request.stop_when && request.stop_when(result.tokens)) stopped = true;
  };
  deliver(token);

  // Greedy without logprobs or adjustments needs only the argmax, which the cuda backend reduces on the device.
  const bool greedy_only = !needs_logits(request);
  std::vector<TaskTiming> trace;
  double decode_ms = 0;
  uint32_t decode_steps = 0, decode_tokens = 0;
  auto unfinished = [&] {
    return !stopped && result.tokens.size() < request.max_new_tokens && !is_eos(token) && m.position < m.max_context;
  };
  while (unfinished()) {
    auto step_start = std::chrono::steady_clock::now();
    std::vector<int32_t> draft;  // the token to feed, then the tokens proposed after it
    // Not for the last token: a decode step gives it for less than a check of a draft.
    const uint32_t remaining = request.max_new_tokens - uint32_t(result.tokens.size());
    if (speculation.draft_tokens && remaining > 1 && m.position + speculation.draft_tokens + 1 <= m.max_context)
      draft = next_draft(speculation, m.draft_engine.get(), history, remaining, m.info.vocab, &result.draft_error);
    if (!draft.empty()) {
      // One step feeds the token and the draft; its row i holds the logits after the step's token i. Each row's
      // token is chosen as a decode step would choose it, and the draft is followed while it agrees: the reply
      // is plain decoding's, its uniform draws included.
      draft.insert(draft.begin(), token);
      const uint32_t began = m.position;
      double check_compile_ms = 0;
      const float* rows = checked_step([&] { return m.run_chunk(draft, true, &check_compile_ms); });
      result.compile_ms += check_compile_ms;
      ++decode_steps;
      // The cache holds K and V of every token the step fed; the sequence takes them one row at a time, as
      // decode steps would have fed them, and ends after the last row used (the entries past it are
      // overwritten by the next step).
      m.rewind(began);
      for (uint32_t i = 0;; ++i) {
        // NaN logits throw here, the sequence where this token's decode step would have begun.
        token = pick(rows + size_t(i) * m.info.vocab, began + i);
        m.sequence.push_back(draft[i]);
        m.rewind(began + i + 1);  // forward: the step fed draft[i] at began + i
        history.push_back(token);
        ++decode_tokens;
        decode_ms += ms_since(step_start) - check_compile_ms;
        // Row i is compared with the draft's token i + 1 (the last row has none: its token is a bonus). Drafted
        // tokens past the row where the reply ends are never compared, and not counted.
        const bool compared = i + 1 < draft.size();
        const bool agrees = compared && token == draft[i + 1];
        result.draft_tokens += compared ? 1 : 0;
        result.accepted_tokens += agrees ? 1 : 0;
        deliver(token);  // outside the timed part, as a decode step's callbacks are
        step_start = std::chrono::steady_clock::now();
        check_compile_ms = 0;
        if (!agrees || !unfinished()) break;
      }
      continue;
    }
    // A warm step (the second), or the last one there will be (by the token count or the context).
    const bool record = !request.trace_path.empty() && trace.empty() &&
                        (decode_steps == 1 || result.tokens.size() + 1 >= request.max_new_tokens || m.position + 1 >= m.max_context);
    if (greedy_only && !record) {
      token = checked_step([&] { return m.decode_greedy_step(token); });
      result.tokens.push_back(token);
      counts.add_generated(token);
    } else {
      token = checked_step([&] { return pick(m.decode_step(token, record ? &trace : nullptr)); });
    }
    decode_ms += ms_since(step_start);
    ++decode_steps;
    ++decode_tokens;
    if (speculation.draft_tokens) history.push_back(token);
    deliver(token);
  }
  if (!request.trace_path.empty()) {
    if (trace.empty()) {  // no decode step ran (one token, or eos first): trace one more, then take it back
      // The prompt left room for a decode step (checked above) and none ran, so it fits.
      const uint32_t before = m.position;
      m.decode_step(token, &trace);
      m.rewind(before);  // the sequence ends where it would without a trace
    }
    if (writes_trace) {
      write_chrome_trace(request.trace_path, m.decode_program_of_rank0().program, trace);
      result.trace_written = true;
    }
  }
  result.finish_reason = is_eos(token)                                 ? "eos"
                         : stopped                                       ? "stopped"
                         : result.tokens.size() >= request.max_new_tokens ? "length"
                                                                         : "context";
  result.decode_steps = decode_steps;
  if (decode_tokens) {
    result.tpot_ms = decode_ms / decode_tokens;
    result.decode_tok_s = 1000.0 / result.tpot_ms;
  }
  return result;
}

Schedule parse_schedule(std::string_view text) {
  if (text == "dataflow") return Schedule::dataflow;
  if (text == "bsp") return Schedule::bsp;
  throw InputError("--schedule expects dataflow or bsp, got '" + std::string(text) + "'");
}

Granularity parse_granularity(std::string_view text) {
  for (Granularity g : {Granularity::tile, Granularity::head, Granularity::op})
    if (text == granularity_name(g)) return g;
  throw InputError("--granularity expects tile, head or op, got '" + std::string(text) + "'");
}

const char* granularity_name(Granularity granularity) {
  switch (granularity) {
    case Granularity::tile: return "tile";
    case Granularity::head: return "head";
    case Granularity::op: return "op";
  }
  return "?";
}

std::vector<int32_t> byte_tokens(std::string_view text) {
  std::vector<int32_t> tokens;
  for (unsigned char c : text) tokens.push_back(c);
  return tokens;
}

std::string bytes_text(const std::vector<int32_t>& tokens) {
  std::string text;
  for (int32_t t : tokens) {
    if (t >= 0 && t < 256) {
      text.push_back(char(t));
    } else {
      text.push_back('<');
      text.append(std::to_string(t));
      text.push_back('>');
    }
  }
  return text;
}

}  // namespace tilefire
