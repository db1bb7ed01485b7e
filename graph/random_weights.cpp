// Deterministic random checkpoints: gen-model folders (streamed, optionally sharded) and in-memory images.
//
// Every tensor has its own generator seeded from (seed, tensor name), so a tensor's values do not depend
// on which other tensors exist or in what order they are written, and every platform gets the same bits.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "graph/json_file.h"
#include "graph/weights.h"
#include "ops/splitmix64.h"

namespace tilefire {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& origin, const std::string& what) {
  throw InputError(origin + ": " + what);
}

uint64_t tensor_stream_seed(uint64_t seed, const std::string& name) {
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a of the name, then mixed with the seed
  for (unsigned char c : name) hash = (hash ^ c) * 0x100000001b3ull;
  uint64_t state = seed ^ hash;
  return splitmix64_next(state);
}

// How a tensor is initialised: value = offset + scale * u, u uniform in [-1, 1).
struct Init {
  float scale;
  float offset;
};

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Init init_for(const std::string& name, const ModelSpec& spec) {
  const double sqrt3 = std::sqrt(3.0);  // uniform [-a, a] has std a / sqrt(3)
  // RMSNorm gains (layer, final, q/k norms) near 1, as stored (Gemma stores gain - 1).
  if (ends_with(name, "norm.weight")) return {0.1f, 1.0f - spec.norm_weight_offset()};
  if (ends_with(name, ".bias")) return {0.02f, 0.0f};
  // Embedding rows with unit RMS: the residual stream starts at a scale the norms expect.
  if (name == "model.embed_tokens.weight") return {float(sqrt3), 0.0f};
  // Logits of O(1) from unit-RMS hidden states.
  if (name == "lm_head.weight") return {float(sqrt3 / std::sqrt(double(spec.hidden))), 0.0f};
  return {float(0.02 * sqrt3), 0.0f};
}

// Produces a tensor's bytes in the file dtype, in bounded chunks, so a 16 GB checkpoint streams.
class TensorGenerator {
 public:
  TensorGenerator(const ExpectedTensor& tensor, const ModelSpec& spec, DType dtype, uint64_t seed)
      : init_(init_for(tensor.name, spec)), dtype_(dtype), state_(tensor_stream_seed(seed, tensor.name)) {
    remaining_ = 1;
    for (uint64_t dim : tensor.shape) remaining_ *= dim;
  }

  // Fills `out` with up to `max_elements` elements; returns the byte count (0 when done).
  size_t next_chunk(std::vector<uint8_t>& out, uint64_t max_elements) {
    const uint64_t count = std::min(remaining_, max_elements);
    out.resize(count * dtype_size(dtype_));
    for (uint64_t i = 0; i < count; ++i) {
      // 24 random bits -> u in [-1, 1) exactly representable in f32.
      const float unit = float(int32_t(splitmix64_next(state_) >> 40) - (1 << 23)) * 0x1p-23f;
      // fmaf rounds once everywhere, whatever the compiler's contraction settings.
      const float value = std::fma(init_.scale, unit, init_.offset);
      uint8_t* slot = out.data() + i * dtype_size(dtype_);
      if (dtype_ == DType::f32) {
        std::memcpy(slot, &value, 4);
      } else {
        const uint16_t half = dtype_ == DType::bf16 ? f32_to_bf16(value) : f32_to_f16(value);
        std::memcpy(slot, &half, 2);
      }
    }
    remaining_ -= count;
    return out.size();
  }

 private:
  Init init_;
  DType dtype_;
  uint64_t state_;
  uint64_t remaining_;
};

constexpr uint64_t kChunkElements = uint64_t(1) << 20;

uint64_t tensor_bytes(const ExpectedTensor& tensor, DType dtype) {
  uint64_t count = dtype_size(dtype);
  for (uint64_t dim : tensor.shape) count *= dim;
  return count;
}

// The mark gen-model leaves in the metadata of what it writes: only files that carry it are ever replaced.
constexpr const char* kGenModelWriter = "tilefire gen-model";

// The 8-byte length and the JSON header for `tensors`, laid out back to back in the given order. The
// header is padded with spaces to a multiple of 8 so the data section is aligned for every dtype.
std::vector<uint8_t> safetensors_header(const std::vector<const ExpectedTensor*>& tensors, DType dtype) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}, {"writer", kGenModelWriter}};
  uint64_t offset = 0;
  for (const ExpectedTensor* tensor : tensors) {
    const uint64_t bytes = tensor_bytes(*tensor, dtype);
    header[tensor->name] = {{"dtype", std::string(safetensors_dtype_name(dtype))},
                            {"shape", tensor->shape},
                            {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<uint8_t> out(8 + text.size());
  const uint64_t length = text.size();
  std::memcpy(out.data(), &length, 8);  // little-endian host (checked in safetensors.cpp)
  std::memcpy(out.data() + 8, text.data(), text.size());
  return out;
}

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};
using FileHandle = std::unique_ptr<std::FILE, FileCloser>;

void write_bytes(std::FILE* file, const void* data, size_t size, const std::string& origin) {
  if (size != 0 && std::fwrite(data, 1, size, file) != size) {
    fail(origin, std::string("write failed (") + std::strerror(errno) + ")");
  }
}

void write_text_file(const std::filesystem::path& path, const std::string& text) {
  FileHandle file(std::fopen(path.c_str(), "wb"));
  if (!file) fail(path.string(), std::string("cannot create (") + std::strerror(errno) + ")");
  write_bytes(file.get(), text.data(), text.size(), path.string());
  if (std::fclose(file.release()) != 0) fail(path.string(), std::string("write failed (") + std::strerror(errno) + ")");
}

// Writes one safetensors file holding `tensors`, generating each tensor's bytes as it goes.
void write_safetensors_file(const std::filesystem::path& path, const std::vector<const ExpectedTensor*>& tensors,
                            const ModelSpec& spec, const RandomWeightOptions& options) {
  const std::string origin = path.string();
  FileHandle file(std::fopen(path.c_str(), "wb"));
  if (!file) fail(origin, std::string("cannot create (") + std::strerror(errno) + ")");
  const std::vector<uint8_t> header = safetensors_header(tensors, options.dtype);
  write_bytes(file.get(), header.data(), header.size(), origin);
  std::vector<uint8_t> chunk;
  for (const ExpectedTensor* tensor : tensors) {
    TensorGenerator generator(*tensor, spec, options.dtype, options.seed);
    while (size_t bytes = generator.next_chunk(chunk, kChunkElements)) write_bytes(file.get(), chunk.data(), bytes, origin);
  }
  if (std::fclose(file.release()) != 0) fail(origin, std::string("write failed (") + std::strerror(errno) + ")");
}

std::string shard_file_name(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

// A file gen-model writes: the single file, the index, or a shard of any count.
bool is_model_weights_file(const std::string& name) {
  if (name == "model.safetensors" || name == "model.safetensors.index.json") return true;
  unsigned index = 0, count = 0;
  char tail = 0;
  return name.size() == std::string("model-00001-of-00001.safetensors").size() &&
         std::sscanf(name.c_str(), "model-%5u-of-%5u.safetensor%c", &index, &count, &tail) == 3 && tail == 's';
}

// True when `path` (a safetensors file, or an index) carries gen-model's mark in its metadata. The header
// is read by hand: SafetensorsFile::open maps and pages in the whole file, gigabytes for a real shard.
bool written_by_gen_model(const std::filesystem::path& path) {
  try {
    json metadata;
    if (path.extension() == ".json") {
      const json index = read_json_file(path, path.string());
      if (index.is_object() && index.contains("metadata")) metadata = index["metadata"];
    } else {
      std::ifstream in(path, std::ios::binary);
      uint64_t length = 0;
      if (!in.read(reinterpret_cast<char*>(&length), 8) || length > (64u << 20)) return false;
      std::string text(length, '\0');
      if (!in.read(text.data(), std::streamsize(length))) return false;
      const json header = json::parse(text);
      if (header.is_object() && header.contains("__metadata__")) metadata = header["__metadata__"];
    }
    return metadata.is_object() && metadata.value("writer", "") == kGenModelWriter;
  } catch (const std::exception&) {
    return false;
  }
}

// gen-model writes config.json and weight files into `folder`: weights it did not write itself (a real
// checkpoint there, or `--out .` inside one) are refused before anything is written, so nothing of the
// user's is overwritten, deleted or left to shadow the new files. So is a config.json with no weights of
// gen-model's beside it (a model whose weights are elsewhere, or not yet downloaded): gen-model's own
// config.json always has its weights beside it.
void refuse_foreign_files(const std::filesystem::path& folder) {
  std::error_code error;
  bool own_weights = false;
  for (const auto& entry : std::filesystem::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    if (!is_model_weights_file(name)) continue;
    if (!written_by_gen_model(entry.path()))
      fail(folder.string(), "holds " + name + ", which gen-model did not write: it would be overwritten or shadowed; give --out a "
                            "new folder, or remove the model there first");
    own_weights = true;
  }
  if (!own_weights && std::filesystem::exists(std::filesystem::symlink_status(folder / "config.json", error)))
    fail(folder.string(), "holds a config.json without weights gen-model wrote beside it (another model's): it would be "
                          "overwritten; give --out a new folder, or remove config.json there first");
}

// The weights of an earlier gen-model run into the same folder (a single file beside a new index shadows
// it, as it does for transformers; shards of another count are clutter), except the files this run
// wrote. Every weight file there carries gen-model's mark (refuse_foreign_files ran first).
void remove_earlier_weights(const std::filesystem::path& folder, const std::vector<std::string>& written) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    if (is_model_weights_file(name) && std::find(written.begin(), written.end(), name) == written.end())
      std::filesystem::remove(entry.path(), error);
  }
}

}  // namespace

void write_random_hf_folder(const ModelSpec& spec, const RandomWeightOptions& options,
                            const std::filesystem::path& folder) {
  validate_spec(spec, "gen-model");
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  if (error) fail(folder.string(), "cannot create folder (" + error.message() + ")");
  refuse_foreign_files(folder);

  ModelSpec written = spec;
  written.dtype = options.dtype;
  write_text_file(folder / "config.json", to_hf_config_json(written));

  const std::vector<ExpectedTensor> tensors = expected_tensors(spec);
  if (options.max_shard_bytes == 0) {
    std::vector<const ExpectedTensor*> all;
    for (const ExpectedTensor& tensor : tensors) all.push_back(&tensor);
    write_safetensors_file(folder / "model.safetensors", all, spec, options);
    remove_earlier_weights(folder, {"model.safetensors"});
    return;
  }

  // Greedy split in expected order: a shard closes when the next tensor would push it past the limit
  // (a single tensor larger than the limit gets a shard of its own).
  std::vector<std::vector<const ExpectedTensor*>> shards(1);
  uint64_t shard_bytes = 0, total_bytes = 0;
  for (const ExpectedTensor& tensor : tensors) {
    const uint64_t bytes = tensor_bytes(tensor, options.dtype);
    if (!shards.back().empty() && shard_bytes + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(&tensor);
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  json weight_map = json::object();
  std::vector<std::string> written_files{"model.safetensors.index.json"};
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = shard_file_name(i, shards.size());
    write_safetensors_file(folder / name, shards[i], spec, options);
    for (const ExpectedTensor* tensor : shards[i]) weight_map[tensor->name] = name;
    written_files.push_back(name);
  }
  json index = {{"metadata", {{"total_size", total_bytes}, {"writer", kGenModelWriter}}}, {"weight_map", weight_map}};
  write_text_file(folder / "model.safetensors.index.json", index.dump(2) + "\n");
  remove_earlier_weights(folder, written_files);
}

std::vector<uint8_t> random_safetensors_image(const ModelSpec& spec, const RandomWeightOptions& options) {
  validate_spec(spec, "random weights");
  const std::vector<ExpectedTensor> tensors = expected_tensors(spec);
  std::vector<const ExpectedTensor*> all;
  uint64_t total_bytes = 0;
  for (const ExpectedTensor& tensor : tensors) {
    all.push_back(&tensor);
    total_bytes += tensor_bytes(tensor, options.dtype);
  }
  std::vector<uint8_t> image = safetensors_header(all, options.dtype);
  image.reserve(image.size() + total_bytes);
  std::vector<uint8_t> chunk;
  for (const ExpectedTensor* tensor : all) {
    TensorGenerator generator(*tensor, spec, options.dtype, options.seed);
    while (size_t bytes = generator.next_chunk(chunk, kChunkElements)) {
      image.insert(image.end(), chunk.begin(), chunk.begin() + bytes);
    }
  }
  return image;
}

LoadedModel builtin_sample_model() {
  ModelSpec spec = preset_spec("tiny", DType::f32);
  RandomWeightOptions options;
  options.dtype = DType::f32;
  options.seed = 0;
  const std::string origin = "built-in sample (tiny)";
  WeightStore weights = WeightStore::from_file(SafetensorsFile::from_bytes(random_safetensors_image(spec, options), origin));
  check_weights_against_spec(spec, weights, origin);
  return LoadedModel{std::move(spec), std::move(weights), origin};
}

}  // namespace tilefire
