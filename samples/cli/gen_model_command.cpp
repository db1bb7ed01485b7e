// tilefire gen-model: a deterministic random-weight Hugging Face folder of a preset.
#include <cstdio>

#include "args.h"
#include "commands.h"
#include "tilefire/engine.h"

namespace tilefire::cli {

int gen_model_command(int argc, char** argv) {
  Args args("gen-model", {"--help"}, {"--preset", "--out", "--dtype", "--seed", "--shard-mb"});
  args.parse(argc, argv, 2);
  if (args.has("--help")) {
    std::printf(
        "usage: tilefire gen-model --preset NAME --out DIR [--dtype f32|bf16|f16] [--seed N] [--shard-mb MB]\n"
        "\n"
        "A Hugging Face folder (config.json and safetensors) of a preset's shape with random weights.\n"
        "  --out DIR       the folder (made when missing; one holding another model's files is refused)\n"
        "  --dtype NAME    the weights' dtype (default f32)\n"
        "  --seed N        the random weights' seed (default 0)\n"
        "  --shard-mb MB   shards of at most MB megabytes with an index, as large checkpoints come (default 0:\n"
        "                  one model.safetensors)\n"
        "presets:");
    for (const std::string& name : preset_names()) std::printf(" %s", name.c_str());
    std::printf("\n");
    return 0;
  }
  if (!args.has("--preset")) throw InputError("tilefire gen-model: --preset NAME is required");
  if (!args.has("--out")) throw InputError("tilefire gen-model: --out DIR is required");
  const std::string preset = *args.text("--preset"), out = *args.text("--out");
  const std::string dtype = args.text_or("--dtype", "f32");
  const uint64_t seed = args.unsigned_or("--seed", 0);
  const uint64_t shard_bytes = args.unsigned_or("--shard-mb", 0, 0, 1u << 20) << 20;
  write_random_model(preset, out, dtype, seed, shard_bytes);
  std::printf("wrote %s (preset %s, %s, seed %llu)\n", out.c_str(), preset.c_str(), dtype.c_str(),
              static_cast<unsigned long long>(seed));
  return 0;
}

}  // namespace tilefire::cli
