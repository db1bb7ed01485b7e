// WeightStore (one file or index-listed shards), the tensors a spec expects, and the checks between them.
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "graph/chat_template.h"
#include "graph/json_file.h"
#include "graph/regular_file.h"
#include "graph/weights.h"

namespace tilefire {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& origin, const std::string& what) {
  throw InputError(origin + ": " + what);
}


// Shard names come from a file we did not write: keep them inside the checkpoint folder.
void check_shard_name(const std::string& shard, const std::string& index_origin, const std::string& tensor) {
  std::filesystem::path shard_path(shard);
  bool plain = !shard.empty() && shard_path.is_relative() && shard_path.filename() == shard_path &&
               shard != "." && shard != "..";
  if (!plain) {
    fail(index_origin, "weight_map gives tensor '" + tensor + "' the shard '" + shard +
                           "'; shards must be plain file names inside the folder");
  }
}

// The index's weight_map (tensor name -> shard file), checked: an object of plain file names, not empty.
const json& checked_weight_map(const json& index, const std::string& index_origin) {
  if (!index.is_object() || !index.contains("weight_map") || !index.at("weight_map").is_object()) {
    fail(index_origin, "key 'weight_map' must be an object of tensor name -> shard file");
  }
  const json& weight_map = index.at("weight_map");
  if (weight_map.empty()) fail(index_origin, "key 'weight_map' lists no tensors");
  for (const auto& [tensor, shard_node] : weight_map.items()) {
    if (!shard_node.is_string()) fail(index_origin, "weight_map entry for '" + tensor + "' must be a file name");
    check_shard_name(shard_node.get<std::string>(), index_origin, tensor);
  }
  return weight_map;
}

}  // namespace

WeightStore WeightStore::from_file(std::unique_ptr<SafetensorsFile> file) {
  WeightStore store;
  std::shared_ptr<SafetensorsFile> shared(std::move(file));
  for (const auto& [name, view] : shared->tensors()) store.index_.emplace(name, &view);
  store.files_.push_back(std::move(shared));
  return store;
}

WeightStore WeightStore::open_folder(const std::filesystem::path& folder) {
  const std::filesystem::path index_path = folder / "model.safetensors.index.json";
  const std::filesystem::path single_path = folder / "model.safetensors";
  std::error_code ignored;
  // A single file first, then an index, as transformers' from_pretrained looks for them. A dangling or
  // looping link is opened too, so that the message says what is wrong with it.
  if (std::filesystem::exists(single_path, ignored) || std::filesystem::is_symlink(single_path, ignored))
    return from_file(SafetensorsFile::open(single_path));
  if (!std::filesystem::exists(index_path, ignored)) fail(folder.string(), "no model.safetensors or model.safetensors.index.json");

  const std::string index_origin = index_path.string();
  json index = read_json_file(index_path, index_path.string(), true);  // a tensor listed twice: which shard?
  const json& weight_map = checked_weight_map(index, index_origin);

  WeightStore store;
  std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;  // shard file name -> opened file
  for (const auto& [tensor, shard_node] : weight_map.items()) {
    const std::string shard = shard_node.get<std::string>();
    if (shards.count(shard) != 0) continue;
    std::unique_ptr<SafetensorsFile> file;
    try {
      file = SafetensorsFile::open(folder / shard);
    } catch (const InputError& error) {
      // Name the index and the tensor that led here as well as the shard's own problem.
      fail(index_origin, "shard '" + shard + "' (listed for tensor '" + tensor + "') failed: " + error.what());
    }
    shards.emplace(shard, std::move(file));
  }

  for (const auto& [shard, file] : shards) {
    for (const auto& [name, view] : file->tensors()) {
      auto [position, inserted] = store.index_.emplace(name, &view);
      if (!inserted) {
        fail(index_origin, "tensor '" + name + "' appears in both " + position->second->file + " and " + view.file);
      }
    }
    store.files_.push_back(file);
  }
  for (const auto& [tensor, shard_node] : weight_map.items()) {
    const std::string shard = shard_node.get<std::string>();
    if (shards.at(shard)->tensors().count(tensor) == 0) {
      fail(index_origin, "weight_map places tensor '" + tensor + "' in " + shard + ", which does not hold it");
    }
  }
  return store;
}

const TensorView* WeightStore::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const TensorView& WeightStore::require(const std::string& name, const std::vector<uint64_t>& shape) const {
  const TensorView* view = find(name);
  if (view == nullptr) {
    std::string where = files_.empty() ? std::string("empty weight store") : files_.front()->origin();
    if (files_.size() > 1) where += " and " + std::to_string(files_.size() - 1) + " other shard(s)";
    fail(where, "missing tensor '" + name + "' (expected shape " + shape_text(shape) + ")");
  }
  if (view->shape != shape) {
    fail(view->file, "tensor '" + name + "' has shape " + shape_text(view->shape) + ", expected " + shape_text(shape));
  }
  return *view;
}

void WeightStore::add_row_range(const std::string& whole, const std::string& name, uint64_t row_begin, uint64_t row_end) {
  const TensorView* fused = find(whole);
  if (fused == nullptr) fail("weight store", "no tensor '" + whole + "' to take '" + name + "' from");
  if (fused->shape.size() != 2 || row_begin >= row_end || row_end > fused->shape[0])
    fail(fused->file, "tensor '" + whole + "' of shape " + shape_text(fused->shape) + " has no rows [" + std::to_string(row_begin) +
                          ", " + std::to_string(row_end) + ") for '" + name + "'");
  if (find(name) != nullptr) fail(fused->file, "tensor '" + name + "' is both in the checkpoint and a part of '" + whole + "'");
  const uint64_t row_bytes = fused->nbytes / fused->shape[0];  // [rows, columns] row-major
  auto part = std::make_shared<TensorView>();
  part->name = name;
  part->dtype = fused->dtype;
  part->shape = {row_end - row_begin, fused->shape[1]};
  part->data = static_cast<const uint8_t*>(fused->data) + row_begin * row_bytes;
  part->nbytes = (row_end - row_begin) * row_bytes;
  part->file = fused->file;
  index_[name] = part.get();
  row_ranges_.push_back(std::move(part));
}

bool WeightStore::is_row_range(const std::string& name) const {
  const TensorView* view = find(name);
  for (const auto& part : row_ranges_)
    if (part.get() == view) return view != nullptr;
  return false;
}

std::optional<std::string> text_model_name(const std::string& name) {
  auto starts_with = [&](const char* prefix) { return name.rfind(prefix, 0) == 0; };
  if (starts_with("language_model.model.") || starts_with("model.language_model."))  // prefixes of one length
    return "model." + name.substr(std::string("language_model.model.").size());
  if (name == "language_model.lm_head.weight") return std::string("lm_head.weight");
  if (starts_with("vision_tower.") || starts_with("multi_modal_projector.") || starts_with("model.vision_tower.") ||
      starts_with("model.multi_modal_projector."))
    return std::nullopt;  // the image encoder: a text prompt never runs it
  return name;
}

void WeightStore::take_language_model(const std::string& origin) {
  std::map<std::string, const TensorView*> text_model;  // a view's own name stays the checkpoint's
  for (const auto& [name, view] : index_) {
    const std::optional<std::string> renamed = text_model_name(name);
    if (!renamed) continue;
    if (const auto [taken, inserted] = text_model.emplace(*renamed, view); !inserted)
      fail(origin, "the checkpoint holds the text model's tensor '" + *renamed + "' twice, as '" + taken->second->name + "' and as '" +
                       view->name + "'");
  }
  index_ = std::move(text_model);
}

std::vector<std::string> stored_tensor_names(const std::filesystem::path& folder) {
  const std::filesystem::path index_path = folder / "model.safetensors.index.json";
  const std::filesystem::path single_path = folder / "model.safetensors";
  std::error_code ignored;
  std::vector<std::string> names;
  if (std::filesystem::exists(single_path, ignored) || std::filesystem::is_symlink(single_path, ignored)) {
    // The 8-byte header length and the JSON header after it; the tensors' bytes are not read. Opened as
    // SafetensorsFile::open opens it (a FIFO is refused, not waited on).
    const RegularFile file(single_path, "safetensors file");
    const std::string& origin = file.origin();
    const int fd = file.fd();
    const uint64_t size = file.size();
    uint64_t header_length = 0;
    if (size < 8 || ::pread(fd, &header_length, 8, 0) != 8)
      fail(origin, "file is " + std::to_string(size) + " bytes, too short for the 8-byte header length");
    // The format caps its header at 100 MB; a larger length is a damaged file, not an allocation to make.
    if (header_length > size - 8 || header_length > (100ull << 20))
      fail(origin, "truncated or damaged: the header length says " + std::to_string(header_length) + " bytes, and the file holds " +
                       std::to_string(size - 8) + " after it");
    std::string header(header_length, '\0');
    if (::pread(fd, header.data(), header_length, 8) != ssize_t(header_length)) fail(origin, "cannot read the header");
    const json parsed = parse_json_text(header.data(), header.data() + header.size(), origin + ": header", true);
    if (!parsed.is_object()) fail(origin + ": header", "must be a JSON object of tensor name -> entry");
    for (const auto& [name, entry] : parsed.items())
      if (name != "__metadata__") names.push_back(name);
    return names;
  }
  if (!std::filesystem::exists(index_path, ignored)) fail(folder.string(), "no model.safetensors or model.safetensors.index.json");
  const json index = read_json_file(index_path, index_path.string(), true);
  for (const auto& [name, shard] : checked_weight_map(index, index_path.string()).items()) names.push_back(name);
  return names;
}

std::vector<ExpectedTensor> expected_tensors(const ModelSpec& spec) {
  const uint64_t hidden = spec.hidden, q_dim = spec.q_dim(), kv_dim = spec.kv_dim(), ffn = spec.ffn;
  const uint64_t head_dim = spec.head_dim, vocab = spec.vocab;
  std::vector<ExpectedTensor> tensors;
  tensors.push_back({"model.embed_tokens.weight", {vocab, hidden}, true});
  for (uint32_t layer = 0; layer < spec.layers; ++layer) {
    const std::string prefix = "model.layers." + std::to_string(layer) + ".";
    tensors.push_back({prefix + "input_layernorm.weight", {hidden}, false});
    if (spec.fused_projections()) {
      tensors.push_back({prefix + "self_attn.qkv_proj.weight", {q_dim + 2 * kv_dim, hidden}, true});
    } else {
      tensors.push_back({prefix + "self_attn.q_proj.weight", {q_dim, hidden}, true});
      tensors.push_back({prefix + "self_attn.k_proj.weight", {kv_dim, hidden}, true});
      tensors.push_back({prefix + "self_attn.v_proj.weight", {kv_dim, hidden}, true});
    }
    tensors.push_back({prefix + "self_attn.o_proj.weight", {hidden, q_dim}, true});
    if (spec.qkv_bias) {
      tensors.push_back({prefix + "self_attn.q_proj.bias", {q_dim}, false});
      tensors.push_back({prefix + "self_attn.k_proj.bias", {kv_dim}, false});
      tensors.push_back({prefix + "self_attn.v_proj.bias", {kv_dim}, false});
    }
    if (spec.qk_norm) {
      tensors.push_back({prefix + "self_attn.q_norm.weight", {head_dim}, false});
      tensors.push_back({prefix + "self_attn.k_norm.weight", {head_dim}, false});
    }
    tensors.push_back({prefix + "post_attention_layernorm.weight", {hidden}, false});
    if (spec.sandwich_norms()) {  // Gemma: the MLP's input norm and its output's
      tensors.push_back({prefix + "pre_feedforward_layernorm.weight", {hidden}, false});
      tensors.push_back({prefix + "post_feedforward_layernorm.weight", {hidden}, false});
    }
    if (spec.fused_projections()) {
      tensors.push_back({prefix + "mlp.gate_up_proj.weight", {2 * ffn, hidden}, true});
    } else {
      tensors.push_back({prefix + "mlp.gate_proj.weight", {ffn, hidden}, true});
      tensors.push_back({prefix + "mlp.up_proj.weight", {ffn, hidden}, true});
    }
    tensors.push_back({prefix + "mlp.down_proj.weight", {hidden, ffn}, true});
  }
  tensors.push_back({"model.norm.weight", {hidden}, false});
  if (!spec.tie_embeddings) tensors.push_back({"lm_head.weight", {vocab, hidden}, true});
  return tensors;
}

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Why a tensor of the checkpoint that the model as built does not read is refused, for the message.
std::string unused_tensor_reason(const std::string& name, const ModelSpec& spec) {
  const std::string layers_prefix = "model.layers.";
  if (name.compare(0, layers_prefix.size(), layers_prefix) == 0) {
    const size_t digits_end = name.find('.', layers_prefix.size());
    const std::string digits = name.substr(layers_prefix.size(), digits_end - layers_prefix.size());
    if (!digits.empty() && digits.size() <= 9 && digits.find_first_not_of("0123456789") == std::string::npos &&
        std::stoul(digits) >= spec.layers)
      return "a layer past config.json's num_hidden_layers " + std::to_string(spec.layers) + " (the model would run truncated)";
  }
  for (const char* projection : {".self_attn.q_proj.bias", ".self_attn.k_proj.bias", ".self_attn.v_proj.bias"})
    if (ends_with(name, projection)) return "a query/key/value bias, but config.json's attention_bias is false";
  if (ends_with(name, ".self_attn.o_proj.bias")) return "an output-projection bias, which Tilefire does not apply";
  if (name.find(".mlp.") != std::string::npos && ends_with(name, ".bias")) return "an MLP bias, which Tilefire does not apply";
  if (ends_with(name, ".self_attn.q_norm.weight") || ends_with(name, ".self_attn.k_norm.weight"))
    return "a per-head query/key norm, which " + spec.arch_name + " does not have (Qwen3ForCausalLM does)";
  return "a tensor that a " + spec.arch_name + " model as Tilefire builds it does not read";
}

}  // namespace

void check_weights_against_spec(ModelSpec& spec, WeightStore& weights, const std::string& origin) {
  if (spec.multimodal_checkpoint) weights.take_language_model(origin);
  // A stored LM head is an untied model's (a tied one is saved without it); without one, only the
  // embedding can be the head.
  if (spec.lm_head_tie_from_checkpoint) spec.tie_embeddings = weights.find("lm_head.weight") == nullptr;
  const TensorView* first_matrix = nullptr;
  const std::vector<ExpectedTensor> expected_list = expected_tensors(spec);
  for (const ExpectedTensor& expected : expected_list) {
    const TensorView* view = weights.find(expected.name);
    if (view == nullptr) {
      std::string layouts;  // a multimodal checkpoint's own names for it: published, and as transformers saves it
      if (spec.multimodal_checkpoint) {
        const bool in_model = expected.name.rfind("model.", 0) == 0;
        layouts = ": a " + spec.arch_name + " checkpoint holds it as 'language_model." + expected.name + "' or '" +
                  (in_model ? "model.language_model." + expected.name.substr(std::string("model.").size()) : expected.name) + "'";
      }
      fail(origin, "missing tensor '" + expected.name + "' (expected shape " + shape_text(expected.shape) + ")" + layouts);
    }
    // A multimodal checkpoint's tensor is named as its file names it too.
    const std::string stored_as = view->name != expected.name ? " (stored as '" + view->name + "')" : std::string();
    if (view->shape != expected.shape) {
      fail(origin, "tensor '" + expected.name + "'" + stored_as + " in " + view->file + " has shape " + shape_text(view->shape) +
                       ", but config.json implies " + shape_text(expected.shape));
    }
    if (!expected.matrix) continue;  // norm and bias vectors may be stored in any supported dtype
    if (first_matrix == nullptr) {
      first_matrix = view;
    } else if (view->dtype != first_matrix->dtype) {
      fail(origin, "tensor '" + expected.name + "'" + stored_as + " is " + std::string(safetensors_dtype_name(view->dtype)) +
                       " but '" + first_matrix->name + "' is " +
                       std::string(safetensors_dtype_name(first_matrix->dtype)) +
                       "; all weight matrices must share one dtype");
    }
  }
  // Every tensor of the checkpoint is read, or the model would run without it and give wrong logits
  // (a bias config.json does not announce, layers past num_hidden_layers, a norm of another
  // architecture). Two kinds are left as transformers leaves them: old rotary_emb.inv_freq buffers (the
  // frequencies come from config.json), and lm_head.weight when config.json ties it to the embedding.
  std::set<std::string> expected_names;
  for (const ExpectedTensor& expected : expected_list) expected_names.insert(expected.name);
  for (const auto& [name, view] : weights.tensors()) {
    if (expected_names.count(name) || ends_with(name, ".rotary_emb.inv_freq") || weights.is_row_range(name)) continue;
    if (name == "lm_head.weight" && spec.tie_embeddings) continue;
    fail(origin, "the checkpoint holds '" + view->name + "' (in " + view->file + "), " + unused_tensor_reason(name, spec) +
                     "; refusing to run the model without it");
  }
  // torch_dtype in config.json is often wrong (float32 configs over bf16 files and the reverse); the
  // bytes on disk are what the kernels read, so they decide.
  if (first_matrix != nullptr) spec.dtype = first_matrix->dtype;
  if (spec.is_gemma()) spec.embedding_multiplier = gemma_embedding_scale(spec.hidden, spec.dtype);
  if (spec.fused_projections()) {
    // transformers' Phi3Attention slices qkv_proj's output as q, k, v in turn, and Phi3MLP chunks
    // gate_up_proj's in two, gate first: the same rows of the weights.
    const uint64_t q_dim = spec.q_dim(), kv_dim = spec.kv_dim(), ffn = spec.ffn;
    for (uint32_t layer = 0; layer < spec.layers; ++layer) {
      const std::string prefix = "model.layers." + std::to_string(layer) + ".";
      if (weights.is_row_range(prefix + "self_attn.q_proj.weight")) continue;  // checked before: parts added then
      const std::string qkv = prefix + "self_attn.qkv_proj.weight", gate_up = prefix + "mlp.gate_up_proj.weight";
      weights.add_row_range(qkv, prefix + "self_attn.q_proj.weight", 0, q_dim);
      weights.add_row_range(qkv, prefix + "self_attn.k_proj.weight", q_dim, q_dim + kv_dim);
      weights.add_row_range(qkv, prefix + "self_attn.v_proj.weight", q_dim + kv_dim, q_dim + 2 * kv_dim);
      weights.add_row_range(gate_up, prefix + "mlp.gate_proj.weight", 0, ffn);
      weights.add_row_range(gate_up, prefix + "mlp.up_proj.weight", ffn, 2 * ffn);
    }
  }
}

LoadedModel load_hf_model(const std::filesystem::path& folder) {
  // Say what a model is before "config.json: Not a directory" does it less clearly.
  std::error_code status_error;
  const std::filesystem::file_status status = std::filesystem::status(folder, status_error);
  if (!std::filesystem::exists(status) || status.type() == std::filesystem::file_type::none) {
    const std::string why = status_error ? status_error.message() : std::string("No such file or directory");
    fail(folder.string(), "cannot open model folder (" + why +
                              "); a model is a folder holding config.json and model.safetensors");
  }
  if (!std::filesystem::is_directory(status)) {
    fail(folder.string(), "not a folder (a model is a folder holding config.json and model.safetensors)");
  }
  ModelSpec spec = parse_hf_config(folder / "config.json");
  // transformers' generate() stops at generation_config.json's eos_token_id, and vLLM at those and the
  // model's: every generation stops at both (Qwen2.5's <|endoftext|> beside config.json's <|im_end|>).
  for (int32_t id : read_generation_eos_tokens(folder)) {
    if (uint32_t(id) >= spec.vocab)
      fail((folder / "generation_config.json").string(), "key 'eos_token_id' holds " + std::to_string(id) +
                                                            ", outside the vocabulary of " + std::to_string(spec.vocab) + " tokens");
    if (std::find(spec.eos_tokens.begin(), spec.eos_tokens.end(), id) == spec.eos_tokens.end()) spec.eos_tokens.push_back(id);
  }
  WeightStore weights = WeightStore::open_folder(folder);
  const std::string origin = folder.string();
  check_weights_against_spec(spec, weights, origin);
  return LoadedModel{std::move(spec), std::move(weights), origin};
}

}  // namespace tilefire
