#pragma once
// The sampling flags `tilefire run` and `tilefire chat` share (Sampling in tilefire/engine.h): the cuts
// (--temperature, --top-k, --top-p, --min-p) and what is done to the logits first (--logit-bias and the
// repetition, presence and frequency penalties). --seed stays each command's own (chat draws per turn).
// Beside them the flags of speculative decoding (Speculation), which changes how many steps a reply
// takes, not which reply it is (up to a near tie: a check step's logits round apart from a decode step's).
#include <string>
#include <vector>

#include "args.h"
#include "tilefire/engine.h"

namespace tilefire::cli {

extern const char* const kSamplingHelp;  // the flags' lines of --help, each command's own flags around them
std::vector<std::string> sampling_valued();
// The flags' Sampling (seed 0); a bad value is an InputError naming its flag.
Sampling sampling_of_flags(const Args& args, const std::string& command);

extern const char* const kSpeculationHelp;
std::vector<std::string> speculation_valued();
// --speculate K, --speculate-ngram N, --speculate-min-ngram N, --draft-model DIR (which goes into
// `options.draft`); a draft is checked in one prefill step, so K is below `options.prefill_chunk`.
Speculation speculation_of_flags(const Args& args, const std::string& command, EngineOptions& options);

}  // namespace tilefire::cli
