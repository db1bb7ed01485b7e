// Next-token selection. Every path orders candidates by (logit descending, token id ascending), which is
// the order of probability descending with ties by id for any temperature > 0, and sums probabilities in
// that order, so the same logits, params and draw always give the same token.
//
// Cost at a 128k vocabulary: one pass for the NaN check and the max, one exp per token, and partial
// sorting only as far as the walk needs (top-k uses nth_element; the top-p cut and the inverse-CDF walk
// sort a growing prefix on demand, which for a peaked distribution is a few hundred tokens).
#include "ops/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

namespace tilefire {

namespace {

void check_no_nan(const float* logits, uint32_t vocab) {
  for (uint32_t i = 0; i < vocab; ++i)
    if (std::isnan(logits[i]))
      throw std::runtime_error("sampling: logits contain NaN at token " + std::to_string(i));
}

int32_t argmax_lowest_id(const float* logits, uint32_t vocab) {
  uint32_t best = 0;
  for (uint32_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;  // strict: the lowest id wins ties
  return int32_t(best);
}

// (logit desc, id asc): probability descending with ties by id, for any temperature > 0.
struct MoreProbable {
  const float* logits;
  bool operator()(int32_t a, int32_t b) const {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  }
};

// Candidate ids with a prefix sorted on demand by (logit desc, id asc).
class CandidatesByProbability {
 public:
  CandidatesByProbability(const float* logits, std::vector<int32_t> ids)
      : logits_(logits), ids_(std::move(ids)) {}

  size_t size() const { return ids_.size(); }

  // The i-th most probable candidate; sorts further when the walk passes the sorted prefix. Each growth
  // doubles the prefix, so the total work is O(vocab log prefix) at worst.
  int32_t at(size_t i) {
    if (i >= sorted_) {
      const size_t target = std::min(ids_.size(), std::max<size_t>({i + 1, 2 * sorted_, 256}));
      std::partial_sort(ids_.begin() + sorted_, ids_.begin() + target, ids_.end(), more_probable());
      sorted_ = target;
    }
    return ids_[i];
  }

  // Keeps only the k most probable (nth_element: linear time).
  void keep_top(size_t k) {
    if (k >= ids_.size()) return;
    std::nth_element(ids_.begin(), ids_.begin() + k, ids_.end(), more_probable());
    ids_.resize(k);
    std::sort(ids_.begin(), ids_.end(), more_probable());
    sorted_ = k;
  }

 private:
  MoreProbable more_probable() const { return MoreProbable{logits_}; }
  const float* logits_;
  std::vector<int32_t> ids_;
  size_t sorted_ = 0;
};

}  // namespace

int32_t sample_token(const float* logits, uint32_t vocab, const SamplingParams& params, float uniform01) {
  if (vocab == 0) throw std::invalid_argument("sampling: empty vocabulary");
  check_no_nan(logits, vocab);
  // Greedy for T <= 0 (or NaN), and top_k == 1, whose only candidate is the argmax.
  if (!(params.temperature > 0.0f) || params.top_k == 1) return argmax_lowest_id(logits, vocab);
  const int32_t best = argmax_lowest_id(logits, vocab);
  const float max_logit = logits[best];
  // +inf logits take all the mass (the lowest such id by the tie rule); all -inf: nothing is
  // preferred, fall back to the tie rule as well (token 0).
  if (std::isinf(max_logit)) return best;

  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  CandidatesByProbability candidates(logits, std::move(ids));
  if (params.top_k > 0) candidates.keep_top(params.top_k);

  // Unnormalised probability exp((logit - max) / T), in double.
  const double inverse_temperature = 1.0 / double(params.temperature);
  auto weight = [&](int32_t id) { return std::exp((double(logits[id]) - double(max_logit)) * inverse_temperature); };

  // Top-p over the (top-k restricted, renormalised) distribution: the smallest prefix whose mass
  // reaches top_p, as transformers' TopPLogitsWarper after TopKLogitsWarper. Needs the total mass.
  // Mass of all candidates: the top-k set in its (already sorted) order, else the vocabulary in id order
  // so that no sort is needed.
  double total = 0.0;
  if (params.top_k > 0) {
    for (size_t i = 0; i < candidates.size(); ++i) total += weight(candidates.at(i));
  } else {
    for (uint32_t id = 0; id < vocab; ++id) total += weight(int32_t(id));
  }
  size_t kept = candidates.size();
  if (params.top_p < 1.0f) {
    const double threshold = double(std::max(params.top_p, 0.0f)) * total;
    double cumulative = 0.0;
    for (size_t i = 0; i < candidates.size(); ++i) {
      cumulative += weight(candidates.at(i));
      if (cumulative >= threshold) {
        kept = i + 1;
        break;
      }
    }
    total = 0.0;  // renormalise over the kept prefix
    for (size_t i = 0; i < kept; ++i) total += weight(candidates.at(i));
  }
  // Min-p: the most probable token's weight is 1, so the kept prefix ends at the first weight below min_p.
  if (params.min_p > 0.0f) {
    size_t above = 0;
    while (above < kept && weight(candidates.at(above)) >= double(params.min_p)) ++above;
    kept = std::max<size_t>(above, 1);
    total = 0.0;
    for (size_t i = 0; i < kept; ++i) total += weight(candidates.at(i));
  }

  // Inverse CDF in probability order: the first candidate whose cumulative mass exceeds u * total.
  double u = double(uniform01);
  if (!(u >= 0.0)) u = 0.0;
  u = std::min(u, std::nextafter(1.0, 0.0));
  const double target = u * total;
  double cumulative = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    const int32_t id = candidates.at(i);
    cumulative += weight(id);
    if (cumulative > target) return id;
  }
  return candidates.at(kept - 1);  // rounding left the target just past the last cumulative sum
}

Softmax::Softmax(const float* logits, uint32_t vocab) : logits_(logits), vocab_(vocab) {
  if (vocab == 0) throw std::invalid_argument("Softmax: an empty vocabulary");
  check_no_nan(logits, vocab);
  max_ = logits[argmax_lowest_id(logits, vocab)];
  any_positive_infinity_ = max_ == std::numeric_limits<float>::infinity();
  all_negative_infinity_ = max_ == -std::numeric_limits<float>::infinity();
  for (uint32_t id = 0; id < vocab; ++id) total_ += weight(id);
}

double Softmax::weight(uint32_t id) const {
  if (any_positive_infinity_) return logits_[id] == max_ ? 1.0 : 0.0;
  if (all_negative_infinity_) return 1.0;
  return std::exp(double(logits_[id]) - double(max_));
}

TokenOdds Softmax::odds(int32_t token) const {
  if (token < 0 || uint32_t(token) >= vocab_)
    throw std::out_of_range("Softmax::odds: token " + std::to_string(token) + " outside a vocabulary of " + std::to_string(vocab_));
  const double w = weight(uint32_t(token));
  // In the log domain where it can be: the probability underflows long before its log does.
  const double logprob = any_positive_infinity_ || all_negative_infinity_ ? std::log(w / total_)
                                                                           : double(logits_[token]) - double(max_) - std::log(total_);
  return {token, float(w / total_), float(logprob)};
}

std::vector<TokenOdds> Softmax::top(uint32_t k) const {
  std::vector<int32_t> ids(vocab_);
  std::iota(ids.begin(), ids.end(), 0);
  const size_t count = std::min<size_t>(k, vocab_);
  std::partial_sort(ids.begin(), ids.begin() + count, ids.end(), MoreProbable{logits_});
  std::vector<TokenOdds> result;
  result.reserve(count);
  for (size_t i = 0; i < count; ++i) result.push_back(odds(ids[i]));
  return result;
}

std::vector<TokenOdds> top_probabilities(const float* logits, uint32_t vocab, uint32_t k) {
  if (vocab == 0) return {};
  return Softmax(logits, vocab).top(k);
}

}  // namespace tilefire
