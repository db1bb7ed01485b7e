// tilefire plan: how a model splits over --tp ranks (query and KV heads, FFN columns, vocabulary rows),
// what each rank holds (weights, KV cache, workspace) and reads from its peers, and whether it fits.
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "args.h"
#include "commands.h"
#include "tilefire/plan.h"

namespace tilefire::cli {

namespace {

const char* kPlanHelp = R"(usage: tilefire plan (--model DIR | --preset NAME) --tp N [--gpu-mem 80GiB] [--kv-tokens T] [--json]

  --model DIR      a Hugging Face folder (its config.json is read, and the names of the tensors there
                   when the config leaves the LM head's tie to them)
  --preset NAME    a preset shape (bf16 weights): tiny small llama-3.2-1b qwen3-0.6b gemma-3-1b gemma-2-2b llama-3.1-8b qwen3-8b
  --tp N           tensor-parallel ranks
  --gpu-mem SIZE   memory of one GPU (default 80GiB; units B KiB MiB GiB TiB KB MB GB TB)
  --kv-tokens T    KV-cache positions per rank (default min(model, 4096))
  --json           one JSON object
)";

std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MiB", double(bytes) / 1048576.0);
  return text;
}

}  // namespace

int plan_command(int argc, char** argv) {
  Args args("plan", {"--json", "--help"}, {"--model", "--preset", "--tp", "--gpu-mem", "--kv-tokens"});
  args.parse(argc, argv, 2);
  if (args.has("--help")) {
    std::fputs(kPlanHelp, stdout);
    return 0;
  }
  if (args.has("--model") && args.has("--preset")) throw InputError("tilefire plan: give --model DIR or --preset NAME, not both");
  if (!args.has("--model") && !args.has("--preset")) throw InputError("tilefire plan: give --model DIR or --preset NAME");
  if (!args.has("--tp")) throw InputError("tilefire plan: --tp N is required");
  const TensorParallelPlan plan = plan_tensor_parallel(
      args.text_or("--model", ""), args.text_or("--preset", ""), uint32_t(args.unsigned_or("--tp", 1, 1, 1024)),
      args.bytes_or("--gpu-mem", 80ull << 30), args.unsigned_or("--kv-tokens", 0, 1, 1ull << 32));

  if (args.has("--json")) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const RankPlan& r : plan.ranks)
      ranks.push_back({{"rank", r.rank},
                       {"q_heads", {r.q_head_begin, r.q_head_begin + r.q_heads}},
                       {"kv_heads", {r.kv_head_begin, r.kv_head_begin + r.kv_heads}},
                       {"ffn", {r.ffn_begin, r.ffn_begin + r.ffn}},
                       {"vocab", {r.vocab_begin, r.vocab_begin + r.vocab}},
                       {"weight_bytes", r.weight_bytes},
                       {"kv_cache_bytes", r.kv_cache_bytes},
                       {"workspace_bytes", r.workspace_bytes},
                       {"total_bytes", r.total_bytes},
                       {"exchanged_bytes_per_token_layer", r.exchanged_bytes_per_token_layer},
                       {"logits_gather_bytes", r.logits_gather_bytes}});
    nlohmann::json out = {{"model", plan.model},     {"tp", plan.tp},         {"heads", plan.heads},
                          {"kv_heads", plan.kv_heads}, {"kv_replicas", plan.kv_replicas}, {"kv_tokens", plan.kv_tokens},
                          {"gpu_memory_bytes", plan.gpu_memory_bytes}, {"fits", plan.fits}, {"verdict", plan.verdict},
                          {"ranks", ranks}};
    std::cout << out.dump() << std::endl;
    return 0;
  }
  const std::string kv_split = plan.tp == 1          ? "on the one rank"
                               : plan.kv_replicas > 1 ? "each replicated on " + std::to_string(plan.kv_replicas) + " ranks"
                                                      : "split";
  std::printf("%s over %u rank%s: %u query heads, %u KV heads (%s), FFN %u, vocabulary %u, %u layers\n", plan.model.c_str(),
              plan.tp, plan.tp == 1 ? "" : "s", plan.heads, plan.kv_heads, kv_split.c_str(),
              plan.ffn, plan.vocab, plan.layers);
  std::printf("| rank | query heads | KV heads | FFN columns | vocab rows | weights | KV cache (%llu tokens) | workspace | total |\n",
              static_cast<unsigned long long>(plan.kv_tokens));
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const RankPlan& r : plan.ranks)
    std::printf("| %u | %u-%u | %u-%u | %u-%u | %u-%u | %s | %s | %s | %s |\n", r.rank, r.q_head_begin,
                r.q_head_begin + r.q_heads - 1, r.kv_head_begin, r.kv_head_begin + r.kv_heads - 1, r.ffn_begin,
                r.ffn_begin + r.ffn - 1, r.vocab_begin, r.vocab_begin + r.vocab - 1, mib(r.weight_bytes).c_str(),
                mib(r.kv_cache_bytes).c_str(), mib(r.workspace_bytes).c_str(), mib(r.total_bytes).c_str());
  if (!plan.ranks.empty())
    std::printf("exchanged per token and layer: each rank reads %llu bytes from its peers (two one-shot all-reduces of the "
                "hidden state); once per step %llu bytes of logits\n",
                static_cast<unsigned long long>(plan.ranks[0].exchanged_bytes_per_token_layer),
                static_cast<unsigned long long>(plan.ranks[0].logits_gather_bytes));
  std::printf("verdict: %s\n", plan.verdict.c_str());
  return 0;
}

}  // namespace tilefire::cli
