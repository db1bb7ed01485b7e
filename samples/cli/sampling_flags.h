#pragma once
// The sampling flags `tilefire run` and `tilefire chat` share (Sampling in tilefire/engine.h): the cuts
// (--temperature, --top-k, --top-p, --min-p) and what is done to the logits first (--logit-bias and the
// repetition, presence and frequency penalties). --seed stays each command's own (chat draws per turn).
#include <string>
#include <vector>

#include "args.h"
#include "tilefire/engine.h"

namespace tilefire::cli {

extern const char* const kSamplingHelp;  // the flags' lines of --help, each command's own flags around them
std::vector<std::string> sampling_valued();
// The flags' Sampling (seed 0); a bad value is an InputError naming its flag.
Sampling sampling_of_flags(const Args& args, const std::string& command);

}  // namespace tilefire::cli
