#include "tests/common/random_shapes.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "ops/splitmix64.h"
#include "tests/common/test_models.h"

namespace tilefire::testing {
namespace {

// Uniform in [low, high], from one seed's stream.
class Draw {
 public:
  explicit Draw(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint32_t in(uint32_t low, uint32_t high) { return low + uint32_t(splitmix64_next(state_) % (uint64_t(high) - low + 1)); }
  template <class T>
  T pick(std::initializer_list<T> options) {
    return options.begin()[in(0, uint32_t(options.size()) - 1)];
  }
  bool coin() { return in(0, 1) == 1; }

 private:
  uint64_t state_;
};

// What changes where tiles run and when, never the arithmetic: threads, schedule, policy, granularity.
void draw_schedule(Draw& draw, EngineOptions& o) {
  o.threads = draw.in(1, 3);
  o.schedule = draw.coin() ? Schedule::bsp : Schedule::dataflow;
  const auto policies = placement_policies();  // every registered policy, a new one too
  o.policy = policies[draw.in(0, uint32_t(policies.size()) - 1)].first;
  o.granularity = draw.pick({Granularity::tile, Granularity::head, Granularity::op});
  if (o.tp > 1) {
    o.threads = std::max(o.threads, o.tp);
    if (o.policy == "dynamic") o.policy = "balanced";  // refused under --tp: ranks' queues would order collectives apart
  }
}

}  // namespace

EngineOptions redraw_schedule(const RandomCase& c, uint64_t seed) {
  Draw draw(seed ^ 0x5CEDu);
  EngineOptions o = c.options;
  draw_schedule(draw, o);
  return o;
}

std::string describe_schedule(const EngineOptions& o) {
  return std::to_string(o.threads) + " threads, " + (o.schedule == Schedule::bsp ? "bsp" : "dataflow") + ", " + o.policy +
         ", granularity " + granularity_name(o.granularity);
}

RandomCase draw_random_case(uint64_t seed) {
  Draw draw(seed);
  RandomCase c;
  ModelSpec& s = c.spec;
  // The architecture features of the reference test's variants (tiny's other settings), then new shapes.
  s = variant_spec(draw.pick({Variant::llama, Variant::llama3_rope, Variant::qwen2_bias, Variant::qwen3_qk_norm, Variant::mistral}));
  s.layers = draw.in(1, 2);
  s.head_dim = draw.pick({8u, 16u, 32u, 48u, 64u, 80u, 96u, 128u});
  s.kv_heads = draw.in(1, 4);
  s.heads = s.kv_heads * draw.in(1, 4);
  s.hidden = draw.in(8, 160) * 2 + draw.in(0, 1);  // odd sizes too: rows that no vector width divides
  s.ffn = draw.in(5, 700);
  s.vocab = draw.in(40, 1100);
  s.max_context = 256;
  s.bos_token = 1;
  s.eos_tokens = {2};
  s.tie_embeddings = draw.coin();
  c.dtype = draw.pick({DType::f32, DType::bf16, DType::f16});

  EngineOptions& o = c.options;
  o.kv_splits = draw.pick({0u, 1u, 2u, 3u, 5u});
  o.max_context = draw.pick({64u, 256u});
  // Two to four ranks where the heads split: query heads evenly, KV heads evenly or replicated.
  const uint32_t tp = draw.in(2, 4);
  if (draw.in(0, 2) == 0 && s.heads % tp == 0 && (s.kv_heads >= tp ? s.kv_heads % tp == 0 : tp % s.kv_heads == 0)) o.tp = tp;
  draw_schedule(draw, o);
  // Mostly short prompts; some past the 128-token prefill chunk.
  const uint32_t prompt_length = draw.in(0, 3) == 0 ? draw.in(129, 160) : draw.in(1, 24);
  if (prompt_length + 8 > o.max_context) o.max_context = 256;
  for (uint32_t i = 0; i < prompt_length; ++i) c.prompt.push_back(int32_t(draw.in(0, s.vocab - 1)));

  std::ostringstream d;
  d << "hidden " << s.hidden << ", " << s.layers << " layer(s), " << s.heads << " heads, " << s.kv_heads << " KV heads, head_dim "
    << s.head_dim << ", ffn " << s.ffn << ", vocab " << s.vocab << ", " << s.arch_name << (s.rope_scaling.llama3 ? " llama3 rope" : "")
    << (s.tie_embeddings ? " tied" : "") << ", " << dtype_name(c.dtype) << " weights; tp " << o.tp << ", kv_splits " << o.kv_splits
    << ", max_context " << o.max_context << ", " << describe_schedule(o) << "; prompt of " << prompt_length;
  c.description = d.str();
  return c;
}

uint64_t random_case_count(uint64_t default_count) {
  const char* text = std::getenv("TILEFIRE_RANDOM_SHAPES");
  const uint64_t n = text ? std::strtoull(text, nullptr, 10) : 0;
  return n ? n : default_count;
}

}  // namespace tilefire::testing
