// tilefire: run, benchmark and generate Llama-family models on the dataflow megakernel.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "commands.h"
#include "tilefire/errors.h"

namespace {

const char* kUsage = R"(usage: tilefire <command> [flags]

commands:
  run        generate text from a model (the built-in sample without --model)
  chat       talk with an instruct model in its chat template, a message per line
  serve      an HTTP server with the OpenAI completions and chat completions API
  bench      decode speed, achieved memory bandwidth, dataflow vs bsp
  plan       how a model splits over tensor-parallel ranks, and what each rank needs
  inspect    a compiled program's shape, and its critical path on a device model
  simulate   a program run on a device model: predicted step time, bound, bsp ratio
  gen-model  write a random-weight Hugging Face folder of a preset

`tilefire <command> --help` lists a command's flags.
)";

int dispatch(int argc, char** argv);

}  // namespace

// What a command printed must have reached its destination: a full disk or a closed standard output
// would otherwise end in status 0 with the output lost.
int main(int argc, char** argv) {
  const int status = dispatch(argc, argv);
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    const int error = errno;
    std::fprintf(stderr, "tilefire%s%s: error: writing the standard output failed: %s\n", argc >= 2 ? " " : "", argc >= 2 ? argv[1] : "",
                 std::strerror(error));
    return status != 0 ? status : 1;
  }
  return status;
}

namespace {

int dispatch(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  try {
    if (command == "run") return tilefire::cli::run_command(argc, argv);
    if (command == "chat") return tilefire::cli::chat_command(argc, argv);
    if (command == "gen-model") return tilefire::cli::gen_model_command(argc, argv);
    if (command == "bench") return tilefire::cli::bench_command(argc, argv);
    if (command == "plan") return tilefire::cli::plan_command(argc, argv);
    if (command == "inspect") return tilefire::cli::inspect_command(argc, argv);
    if (command == "simulate") return tilefire::cli::simulate_command(argc, argv);
    if (command == "serve") return tilefire::cli::serve_command(argc, argv);
    std::fprintf(stderr, "tilefire: error: unknown command '%s' (expected run, chat, serve, bench, plan, inspect, simulate or gen-model)\n", command.c_str());
    return 2;
  } catch (const tilefire::InputError& e) {
    // Messages thrown by the commands may already start with "tilefire <command>: "; print it once.
    std::string message = e.what();
    const std::string prefix = "tilefire " + command + ": ";
    if (message.rfind(prefix, 0) == 0) message.erase(0, prefix.size());
    std::fprintf(stderr, "tilefire %s: error: %s\n", command.c_str(), message.c_str());
    return 2;
  } catch (const tilefire::TransportError& e) {  // a tensor-parallel peer died or never arrived
    std::fprintf(stderr, "tilefire %s: transport error: %s\n", command.c_str(), e.what());
    return 3;
  } catch (const tilefire::DeviceError& e) {  // the GPU stopped a step: not an internal error of ours
    std::fprintf(stderr, "tilefire %s: device error: %s\n", command.c_str(), e.what());
    return 3;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "tilefire %s: error: out of memory (what the command builds must fit this machine's memory: the "
                 "model's programs, and to run it its weights and its KV cache of --max-context positions)\n",
                 command.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tilefire %s: internal error: %s\n", command.c_str(), e.what());
    return 1;
  }
}

}  // namespace
