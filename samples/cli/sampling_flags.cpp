// The sampling flags of run and chat (sampling_flags.h).
#include "sampling_flags.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace tilefire::cli {

namespace {

// --logit-bias TOKEN=BIAS[,TOKEN=BIAS...]: a token id and the number added to its logit.
std::vector<std::pair<int32_t, float>> logit_bias_of(const std::string& text, const std::string& command) {
  auto refuse = [&](const std::string& why) -> std::vector<std::pair<int32_t, float>> {
    throw InputError(command + ": --logit-bias expects TOKEN=BIAS pairs separated by commas (5=2.5,7=-100; BIAS from -100 "
                     "to 100), " + why);
  };
  std::vector<std::pair<int32_t, float>> bias;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = text.find(',', pos);
    const std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const size_t equals = item.find('=');
    if (equals == std::string::npos) return refuse("got '" + item + "'");
    const std::string token_text = item.substr(0, equals), bias_text = item.substr(equals + 1);
    char* end = nullptr;
    errno = 0;
    const long long token = std::strtoll(token_text.c_str(), &end, 10);
    if (token_text.empty() || *end != '\0' || errno == ERANGE || token < 0 || token > INT32_MAX)
      return refuse("got the token '" + token_text + "'");
    errno = 0;
    const double value = std::strtod(bias_text.c_str(), &end);
    if (bias_text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(value) || value < -100.0 || value > 100.0)
      return refuse("got the bias '" + bias_text + "'");
    bias.emplace_back(int32_t(token), float(value));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return bias;
}

}  // namespace

const char* const kSamplingHelp =
    R"(  --temperature T        0 = greedy (default 0)
  --top-k K              keep the K most probable tokens (0 = off)
  --top-p P              nucleus sampling mass, in [1e-6, 1] (1 = off)
  --min-p P              keep the tokens at least P times as probable as the most probable (0 = off)
  --logit-bias T=B,...   add B (-100 to 100) to token T's logit before choosing (greedy too)
  --repetition-penalty R a token of the prompt or reply so far: logit / R when positive, * R when not
                         (1 = off; above 1 discourages repeats)
  --presence-penalty P   subtracted from the logit of every token the reply holds, -2 to 2 (0 = off)
  --frequency-penalty F  subtracted per time the reply holds the token, -2 to 2 (0 = off)
)";

std::vector<std::string> sampling_valued() {
  return {"--temperature", "--top-k", "--top-p", "--min-p", "--logit-bias", "--repetition-penalty", "--presence-penalty",
          "--frequency-penalty"};
}

Sampling sampling_of_flags(const Args& args, const std::string& command) {
  Sampling s;
  s.temperature = float(args.number_or("--temperature", 0.0, 0.0, 100.0));
  s.top_k = uint32_t(args.unsigned_or("--top-k", 0, 0, 1u << 30));
  s.top_p = float(args.number_or("--top-p", 1.0, 1e-6, 1.0));
  s.min_p = float(args.number_or("--min-p", 0.0, 0.0, 1.0));
  if (const auto bias = args.text("--logit-bias")) s.logit_bias = logit_bias_of(*bias, command);
  s.repetition_penalty = float(args.number_or("--repetition-penalty", 1.0, 1e-3, 100.0));
  s.presence_penalty = float(args.number_or("--presence-penalty", 0.0, -2.0, 2.0));
  s.frequency_penalty = float(args.number_or("--frequency-penalty", 0.0, -2.0, 2.0));
  return s;
}

const char* const kSpeculationHelp =
    R"(  --speculate K          speculative decoding by prompt lookup: when the text's last tokens occurred
                         before, the K tokens that followed there are checked in one step of K + 1 tokens
                         (plain decoding's reply, up to a near tie; fewer steps when it repeats the prompt
                         or itself; 1 to 31, 0: off)
  --speculate-ngram N    the longest run of last tokens looked up, tried down to the shortest (default 3)
  --speculate-min-ngram N
                         the shortest (default 2: a one-token match is mostly chance)
  --draft-model DIR      with --speculate K: a smaller model of the same vocabulary drafts instead, K tokens
                         of its greedy continuation each step (it runs beside the model, on the same backend)
)";

std::vector<std::string> speculation_valued() {
  return {"--speculate", "--speculate-ngram", "--speculate-min-ngram", "--draft-model"};
}

Speculation speculation_of_flags(const Args& args, const std::string& command, EngineOptions& options) {
  const uint32_t prefill_chunk = options.prefill_chunk;
  Speculation s;
  s.draft_tokens = uint32_t(args.unsigned_or("--speculate", 0, 0, 31));
  s.max_ngram = uint32_t(args.unsigned_or("--speculate-ngram", s.max_ngram, 1, 16));
  s.min_ngram = uint32_t(args.unsigned_or("--speculate-min-ngram", s.min_ngram, 1, 16));
  for (const char* flag : {"--speculate-ngram", "--speculate-min-ngram", "--draft-model"})
    if (args.has(flag) && s.draft_tokens == 0) throw InputError(command + ": " + flag + " goes with --speculate K");
  if (const auto draft = args.text("--draft-model")) {
    for (const char* flag : {"--speculate-ngram", "--speculate-min-ngram"})
      if (args.has(flag))
        throw InputError(command + ": " + flag + " sets prompt lookup's n-grams, and --draft-model drafts instead; give one of them");
    if (draft->empty()) throw InputError(command + ": --draft-model expects a folder");
    options.draft.model_dir = *draft;
    s.source = DraftSource::draft_model;
  }
  if (s.draft_tokens >= prefill_chunk)  // the engine refuses it too, but a server would refuse every request
    throw InputError(command + ": --speculate " + std::to_string(s.draft_tokens) + " checks a draft in a step of " +
                     std::to_string(s.draft_tokens + 1) + " tokens, more than --prefill-chunk " + std::to_string(prefill_chunk));
  if (s.min_ngram > s.max_ngram)
    throw InputError(command + ": --speculate-min-ngram " + std::to_string(s.min_ngram) + " is more than --speculate-ngram " +
                     std::to_string(s.max_ngram));
  return s;
}

}  // namespace tilefire::cli
