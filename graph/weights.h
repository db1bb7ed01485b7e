#pragma once
// Weights of a checkpoint: safetensors files read by mmap (or an owned in-memory image), validated in
// full before any tensor is handed out, and checked against the names and shapes a ModelSpec expects.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "graph/model_spec.h"

namespace tilefire {

struct TensorView {
  std::string name;
  DType dtype = DType::f32;
  std::vector<uint64_t> shape;  // row-major, as in the safetensors header
  const void* data = nullptr;   // points into the mapped file (or the owned image)
  uint64_t nbytes = 0;
  std::string file;  // the file it came from, for messages

  uint64_t numel() const;
};

// One safetensors file. open() validates: the 8-byte header length, the JSON header, every entry's dtype,
// shape and data_offsets (inside the data section, in order, not overlapping, bytes == numel * size),
// and that the file is not truncated. Any failure throws InputError naming the file (and tensor).
class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::filesystem::path& path);
  // Parses an image already in memory; `origin` names it in messages.
  static std::unique_ptr<SafetensorsFile> from_bytes(std::vector<uint8_t> bytes, const std::string& origin);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::string& origin() const { return origin_; }

 private:
  SafetensorsFile() = default;
  void parse(const uint8_t* base, uint64_t size);

  std::string origin_;
  void* mapping_ = nullptr;
  uint64_t mapping_size_ = 0;
  std::vector<uint8_t> owned_;
  std::map<std::string, TensorView> tensors_;
};

// All tensors of a checkpoint: one file, or shards listed by model.safetensors.index.json.
class WeightStore {
 public:
  // `folder` holds model.safetensors, or model.safetensors.index.json and the shards it names.
  static WeightStore open_folder(const std::filesystem::path& folder);
  static WeightStore from_file(std::unique_ptr<SafetensorsFile> file);

  const TensorView* find(const std::string& name) const;
  // The tensor, checked to have exactly `shape`; throws InputError naming the tensor and both shapes.
  const TensorView& require(const std::string& name, const std::vector<uint64_t>& shape) const;
  size_t size() const { return index_.size(); }
  // Every tensor, by name.
  const std::map<std::string, const TensorView*>& tensors() const { return index_; }
  // Adds `name`: rows [row_begin, row_end) of the matrix `whole` (a view of its bytes, nothing copied), for
  // a checkpoint that stores projections fused (Phi-3's qkv_proj). Throws InputError when `whole` is not a
  // matrix holding those rows, or `name` is taken.
  void add_row_range(const std::string& whole, const std::string& name, uint64_t row_begin, uint64_t row_end);
  // Whether `name` was added by add_row_range (not a tensor of the checkpoint's files).
  bool is_row_range(const std::string& name) const;
  // A multimodal checkpoint's text model (ModelSpec::multimodal_checkpoint): its tensors under
  // language_model.model.* or model.language_model.* (and language_model.lm_head.weight) are found under
  // the causal model's names (model.*, lm_head.weight), and the image encoder's (vision_tower.*,
  // multi_modal_projector.*, with or without model.) are left out. Any other name stays as it is. Throws
  // InputError when two of the checkpoint's tensors take one name. Once done, doing it again changes nothing.
  void take_language_model(const std::string& origin);

 private:
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::vector<std::shared_ptr<const TensorView>> row_ranges_;  // add_row_range's views
  std::map<std::string, const TensorView*> index_;
};

// A multimodal checkpoint's tensor as its text model names it (WeightStore::take_language_model):
// language_model.model.X and model.language_model.X are model.X, language_model.lm_head.weight is
// lm_head.weight, the image encoder's tensors have none (nullopt), and any other name is its own.
std::optional<std::string> text_model_name(const std::string& name);

// The names of the tensors a checkpoint folder stores, from model.safetensors' header or
// model.safetensors.index.json's weight_map alone: no tensor's bytes are read (the tools that plan a model
// from its config ask what it stores). Throws InputError naming the file when neither can be read.
std::vector<std::string> stored_tensor_names(const std::filesystem::path& folder);

// "[688, 256]": a shape as messages print it.
std::string shape_text(const std::vector<uint64_t>& shape);

struct ExpectedTensor {
  std::string name;
  std::vector<uint64_t> shape;
  bool matrix = false;  // a projection or embedding (stored in spec.dtype); otherwise a norm or bias vector
};

// Every tensor a checkpoint of this spec must hold, with its shape (HF names: model.embed_tokens.weight,
// model.layers.N.self_attn.q_proj.weight, ..., lm_head.weight unless tied; self_attn.qkv_proj.weight and
// mlp.gate_up_proj.weight in place of their parts where spec.fused_projections()).
std::vector<ExpectedTensor> expected_tensors(const ModelSpec& spec);

struct LoadedModel {
  ModelSpec spec;
  WeightStore weights;
  std::string origin;  // folder, or "built-in sample"
};

// config.json + weights; every expected tensor is present with the right shape, and all matrices share
// one dtype (which becomes spec.dtype). Throws InputError on anything else.
LoadedModel load_hf_model(const std::filesystem::path& folder);
// Checks `weights` against `spec` as load_hf_model does; sets spec.dtype from the matrices. Where the
// checkpoint holds fused projections (spec.fused_projections()), each part is then added under its own name
// (q_proj, k_proj, v_proj, gate_proj, up_proj: views of the fused rows), which is what the compiler reads.
void check_weights_against_spec(ModelSpec& spec, WeightStore& weights, const std::string& origin);

// Deterministic random weights (own RNG, identical on every platform): matrices uniform with std 0.02
// (embeddings 1.0 / sqrt(hidden) scaled), norm weights 1 + small noise, biases small.
struct RandomWeightOptions {
  DType dtype = DType::f32;
  uint64_t seed = 0;
  uint64_t max_shard_bytes = 0;  // 0: one model.safetensors; otherwise shards + index.json
};
// Writes config.json and the weights into `folder` (created), streaming tensor by tensor.
void write_random_hf_folder(const ModelSpec& spec, const RandomWeightOptions& options,
                            const std::filesystem::path& folder);
// The same weights as one in-memory safetensors image (for the built-in sample and tests).
std::vector<uint8_t> random_safetensors_image(const ModelSpec& spec, const RandomWeightOptions& options);
// The built-in sample: the `tiny` preset with seed 0 and f32 weights, built in memory.
LoadedModel builtin_sample_model();

}  // namespace tilefire
