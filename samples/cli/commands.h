#pragma once
// The subcommands of `tilefire`. Each returns the process exit status; InputError propagates to main.
namespace tilefire::cli {

int run_command(int argc, char** argv);        // tilefire run
int chat_command(int argc, char** argv);       // tilefire chat
int gen_model_command(int argc, char** argv);  // tilefire gen-model
int bench_command(int argc, char** argv);      // tilefire bench
int plan_command(int argc, char** argv);       // tilefire plan
int inspect_command(int argc, char** argv);    // tilefire inspect
int simulate_command(int argc, char** argv);   // tilefire simulate
int serve_command(int argc, char** argv);      // tilefire serve

}  // namespace tilefire::cli
