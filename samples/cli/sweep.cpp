// tilefire bench --sweep: the real CPU backend over a grid of placement policies, event granularities and
// thread counts; each cell times dataflow and bsp in interleaved rounds on the same engine, and the
// table (CSV and Markdown) gives each cell's step time and its ratio against bsp.
#include "sweep.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

namespace tilefire::cli {

namespace {

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, separator);)
    if (!part.empty()) parts.push_back(part);
  return parts;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Median step milliseconds of `steps` greedy decode steps after an 8-token prefill.
double decode_ms(Engine& engine, Schedule schedule, uint32_t steps) {
  engine.set_schedule(schedule);
  engine.reset();
  std::vector<int32_t> prompt(8);
  for (uint32_t i = 0; i < 8; ++i) prompt[i] = int32_t((i * 7 + 1) % engine.model().vocab);
  engine.prefill(prompt);
  std::vector<double> times;
  int32_t token = 1;
  for (uint32_t s = 0; s < steps; ++s) {
    const auto start = std::chrono::steady_clock::now();
    token = engine.decode_greedy(token);
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return median_of(times);
}

}  // namespace

int run_sweep(const EngineOptions& base, const std::string& dimensions, const std::string& out_prefix, uint32_t rounds,
              uint32_t steps) {
  std::vector<std::string> policies{base.policy.empty() ? "balanced" : base.policy};
  std::vector<std::string> granularities{base.granularity == Granularity::op ? "op" : "tile"};
  std::vector<uint32_t> threads{base.threads ? base.threads : std::max(1u, std::thread::hardware_concurrency())};
  for (const std::string& dimension : split(dimensions, ',')) {
    if (dimension == "policy") {
      policies.clear();
      for (const auto& [name, description] : placement_policies()) policies.push_back(name);
    } else if (dimension == "granularity") {
      granularities = {"tile", "op"};
    } else if (dimension == "threads") {
      threads.clear();
      const uint32_t cores = std::max(1u, std::thread::hardware_concurrency());
      for (uint32_t t = 1; t < cores; t *= 2) threads.push_back(t);
      threads.push_back(cores);
    } else {
      throw InputError("tilefire bench: --sweep takes policy, granularity and threads, comma-separated; got '" + dimension + "'");
    }
  }
  std::ofstream csv(out_prefix + ".csv"), markdown(out_prefix + ".md");
  if (!csv || !markdown) throw InputError("tilefire bench: --sweep-out: cannot write " + out_prefix + ".csv and .md");
  csv << "policy,granularity,threads,dataflow_ms,bsp_ms,bsp_over_dataflow\n";
  std::ostringstream table;
  table << "| policy | granularity | threads | dataflow ms | bsp ms | bsp / dataflow |\n|---|---|---|---|---|---|\n";
  for (const std::string& policy : policies)
    for (const std::string& granularity : granularities)
      for (uint32_t t : threads) {
        EngineOptions o = base;
        o.policy = policy;
        o.granularity = granularity == "op" ? Granularity::op : Granularity::tile;
        o.threads = t;
        Engine engine(o);
        std::vector<double> dataflow, bsp, ratios;
        for (uint32_t r = 0; r < rounds; ++r) {  // interleaved, the order flipping every round
          const bool bsp_first = r % 2 == 1;
          const double b0 = bsp_first ? decode_ms(engine, Schedule::bsp, steps) : 0;
          const double d = decode_ms(engine, Schedule::dataflow, steps);
          const double b = bsp_first ? b0 : decode_ms(engine, Schedule::bsp, steps);
          dataflow.push_back(d);
          bsp.push_back(b);
          ratios.push_back(b / d);
        }
        char line[256];
        std::snprintf(line, sizeof(line), "%s,%s,%u,%.4f,%.4f,%.3f\n", policy.c_str(), granularity.c_str(), t, median_of(dataflow),
                      median_of(bsp), median_of(ratios));
        csv << line;
        std::snprintf(line, sizeof(line), "| %s | %s | %u | %.4f | %.4f | %.3f |\n", policy.c_str(), granularity.c_str(), t,
                      median_of(dataflow), median_of(bsp), median_of(ratios));
        table << line;
      }
  markdown << table.str();
  std::printf("%s", table.str().c_str());
  std::printf("(%u interleaved rounds of %u decode steps per cell; bsp / dataflow above 1: dataflow faster)\n"
              "written: %s.csv, %s.md\n", rounds, steps, out_prefix.c_str(), out_prefix.c_str());
  return 0;
}

}  // namespace tilefire::cli
