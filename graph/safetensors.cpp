// Safetensors reader: mmap the file (or take an owned image), validate the whole header, hand out views.
//
// Layout: u64 little-endian header length N, N bytes of JSON, then the data section. Every entry's
// data_offsets are relative to the data section. Nothing is handed out until every entry has been
// checked, so a bad file fails at open() with a message, never later inside a kernel.
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "graph/json_file.h"
#include "graph/regular_file.h"
#include "graph/weights.h"

namespace tilefire {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors is little-endian; so must the host be");

using nlohmann::json;

[[noreturn]] void fail(const std::string& origin, const std::string& what) {
  throw InputError(origin + ": " + what);
}


uint64_t read_u64_nonneg(const json& value, const std::string& origin, const std::string& what) {
  if (!value.is_number_unsigned()) {
    // nlohmann stores non-negative literals as unsigned; anything else is negative, fractional or not a number.
    fail(origin, what + " must be a non-negative integer (got " + value.dump() + ")");
  }
  return value.get<uint64_t>();
}

}  // namespace

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

uint64_t TensorView::numel() const {
  uint64_t count = 1;
  for (uint64_t dim : shape) count *= dim;
  return count;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  const RegularFile file(path, "safetensors file");  // closed on every path out: the mapping outlives it
  const std::string& origin = file.origin();
  const uint64_t size = file.size();
  if (size < 8) {
    fail(origin, "file is " + std::to_string(size) + " bytes, too short for the 8-byte header length");
  }

  std::unique_ptr<SafetensorsFile> result(new SafetensorsFile());
  result->origin_ = origin;
  // MAP_POPULATE: every weight is read every step, so fault the whole mapping in now rather than inside
  // the step loop (embedding rows would otherwise fault on the first use of each token, ~100 us a step).
  void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, file.fd(), 0);
  if (mapping == MAP_FAILED) fail(origin, std::string("cannot mmap (") + std::strerror(errno) + ")");
  // Owned by `result` from here: if parse() throws, the destructor unmaps.
  result->mapping_ = mapping;
  result->mapping_size_ = size;
  // Weights are read start to end on the first step; ask the kernel to read ahead. Advice only.
  (void)::madvise(mapping, size, MADV_WILLNEED);
  result->parse(static_cast<const uint8_t*>(mapping), size);
  return result;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::from_bytes(std::vector<uint8_t> bytes, const std::string& origin) {
  std::unique_ptr<SafetensorsFile> result(new SafetensorsFile());
  result->origin_ = origin;
  result->owned_ = std::move(bytes);
  result->parse(result->owned_.data(), result->owned_.size());
  return result;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
}

void SafetensorsFile::parse(const uint8_t* base, uint64_t size) {
  const std::string& origin = origin_;
  if (size < 8) {
    fail(origin, "file is " + std::to_string(size) + " bytes, too short for the 8-byte header length");
  }
  uint64_t header_length;
  std::memcpy(&header_length, base, 8);
  if (header_length > size - 8) {
    fail(origin, "truncated: the header length says " + std::to_string(header_length) + " bytes but only " +
                     std::to_string(size - 8) + " follow it");
  }
  const char* header_text = reinterpret_cast<const char*>(base + 8);
  const json header = parse_json_text(header_text, header_text + header_length, origin + ": header", true);
  if (!header.is_object()) fail(origin, "header must be a JSON object of tensor entries");

  const uint64_t data_start = 8 + header_length;
  const uint64_t data_size = size - data_start;

  struct Extent {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Extent> extents;
  std::map<std::string, TensorView> tensors;

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(origin, "'__metadata__' must be an object of strings");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) fail(origin, "'__metadata__' entry '" + key + "' must be a string");
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!entry.is_object()) fail(origin, where + ": entry must be an object with dtype, shape and data_offsets");
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      if (!entry.contains(key)) fail(origin, where + ": entry has no '" + key + "'");
    }
    const json& dtype_node = entry.at("dtype");
    if (!dtype_node.is_string()) fail(origin, where + ": 'dtype' must be a string");
    const std::string dtype_text = dtype_node.get<std::string>();
    TensorView view;
    view.name = name;
    view.file = origin;
    if (dtype_text == "F32") {
      view.dtype = DType::f32;
    } else if (dtype_text == "BF16") {
      view.dtype = DType::bf16;
    } else if (dtype_text == "F16") {
      view.dtype = DType::f16;
    } else {
      fail(origin, where + " has unsupported dtype '" + dtype_text + "' (supported: F32, BF16, F16)");
    }

    const json& shape_node = entry.at("shape");
    if (!shape_node.is_array()) fail(origin, where + ": 'shape' must be a list of non-negative integers");
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& dim_node : shape_node) {
      uint64_t dim = read_u64_nonneg(dim_node, origin, where + ": every 'shape' entry");
      view.shape.push_back(dim);
      overflow |= __builtin_mul_overflow(numel, dim, &numel);
    }
    uint64_t expected_bytes = 0;
    overflow |= __builtin_mul_overflow(numel, uint64_t(dtype_size(view.dtype)), &expected_bytes);
    if (overflow) fail(origin, where + ": shape " + shape_text(view.shape) + " is too large");

    const json& offsets = entry.at("data_offsets");
    if (!offsets.is_array() || offsets.size() != 2) {
      fail(origin, where + ": 'data_offsets' must be a list [begin, end]");
    }
    const uint64_t begin = read_u64_nonneg(offsets[0], origin, where + ": data_offsets begin");
    const uint64_t end = read_u64_nonneg(offsets[1], origin, where + ": data_offsets end");
    if (end < begin) {
      fail(origin, where + ": data_offsets end " + std::to_string(end) + " is before begin " + std::to_string(begin));
    }
    // The span first: offsets that disagree with the shape are a wrong header, not a short file.
    if (end - begin != expected_bytes) {
      fail(origin, where + ": data_offsets span " + std::to_string(end - begin) + " bytes but shape " +
                       shape_text(view.shape) + " of " + dtype_text + " needs " + std::to_string(expected_bytes));
    }
    if (end > data_size) {
      fail(origin, "truncated: tensor '" + name + "' needs bytes up to " + std::to_string(end) +
                       " but the data section has " + std::to_string(data_size));
    }
    // Element loads go through typed pointers; refuse offsets that would make them misaligned.
    if (begin % dtype_size(view.dtype) != 0) {
      fail(origin, where + ": data_offsets begin " + std::to_string(begin) + " is not a multiple of the " +
                       std::to_string(dtype_size(view.dtype)) + "-byte element size");
    }
    view.nbytes = expected_bytes;
    // Offset for now; turned into a pointer once the data section's final address is known.
    view.data = reinterpret_cast<const void*>(static_cast<uintptr_t>(begin));
    auto inserted = tensors.emplace(name, std::move(view));
    extents.push_back({begin, end, &inserted.first->first});
  }

  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < extents.size(); ++i) {
    // Empty tensors occupy no bytes and so cannot overlap anything.
    if (extents[i].begin == extents[i].end || extents[i - 1].begin == extents[i - 1].end) continue;
    if (extents[i].begin < extents[i - 1].end) {
      fail(origin, "tensors '" + *extents[i - 1].name + "' [" + std::to_string(extents[i - 1].begin) + ", " +
                       std::to_string(extents[i - 1].end) + ") and '" + *extents[i].name + "' [" +
                       std::to_string(extents[i].begin) + ", " + std::to_string(extents[i].end) + ") overlap");
    }
  }

  // The data section is indexed in full, as the format requires and its reference reader checks: a gap
  // or a tail belonging to no tensor means the offsets, or the header length, are off, and every tensor
  // would be read from the wrong bytes.
  uint64_t covered = 0;
  for (const Extent& extent : extents) {
    if (extent.begin == extent.end) continue;
    if (extent.begin > covered)
      fail(origin, "bytes [" + std::to_string(covered) + ", " + std::to_string(extent.begin) + ") of the data section, before tensor '" +
                       *extent.name + "', belong to no tensor (a wrong header length, or wrong data_offsets)");
    covered = std::max(covered, extent.end);
  }
  if (covered != data_size)
    fail(origin, "the data section has " + std::to_string(data_size) + " bytes but its tensors end at " + std::to_string(covered) +
                     " (a wrong header length, or bytes appended to the file)");

  const uint8_t* data_base = base + data_start;
  // A header length that is not a multiple of 8 leaves the data section misaligned for f32 loads. Such
  // files are legal but rare; copy the data section to an aligned owned buffer rather than read
  // through misaligned pointers.
  if (reinterpret_cast<uintptr_t>(data_base) % alignof(float) != 0) {
    std::vector<uint8_t> aligned(data_base, data_base + data_size);
    if (mapping_ != nullptr) {
      ::munmap(mapping_, mapping_size_);
      mapping_ = nullptr;
      mapping_size_ = 0;
    }
    owned_ = std::move(aligned);  // operator new storage is aligned for any scalar
    data_base = owned_.data();
  }
  for (auto& [name, view] : tensors) {
    view.data = data_base + reinterpret_cast<uintptr_t>(view.data);
  }
  tensors_ = std::move(tensors);
}

}  // namespace tilefire
