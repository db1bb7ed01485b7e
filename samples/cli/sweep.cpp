// tilefire bench --sweep: the real CPU backend over a grid of placement policies, event granularities and
// thread counts; each cell times dataflow and bsp in interleaved rounds on the same engine, and the
// table (CSV and Markdown) gives each cell's step time and its ratio against bsp.
#include "sweep.h"

#include "decode_timing.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace tilefire::cli {

namespace {

// Every part, the empty ones too (`policy,,threads` or a trailing comma is a typo, not one dimension less).
std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t begin = 0;
  for (size_t end; (end = text.find(separator, begin)) != std::string::npos; begin = end + 1) parts.push_back(text.substr(begin, end - begin));
  parts.push_back(text.substr(begin));
  return parts;
}

}  // namespace

int run_sweep(const EngineOptions& base, const std::string& dimensions, const std::string& out_prefix, uint32_t rounds,
              uint32_t steps, const std::vector<std::string>& flags_given) {
  std::vector<std::string> policies{base.policy.empty() ? "balanced" : base.policy};
  std::vector<Granularity> granularities{base.granularity};
  std::vector<uint32_t> threads{base.threads ? base.threads : std::max(1u, std::thread::hardware_concurrency())};
  for (const std::string& dimension : split(dimensions, ',')) {
    if (std::find(flags_given.begin(), flags_given.end(), "--" + dimension) != flags_given.end())
      throw InputError("tilefire bench: --" + dimension + " and --sweep " + dimension + ": the sweep runs every " + dimension +
                       " value (drop one of them)");
    if (dimension == "policy") {
      policies.clear();
      for (const auto& [name, description] : placement_policies()) policies.push_back(name);
    } else if (dimension == "granularity") {
      granularities = {Granularity::tile, Granularity::head, Granularity::op};
    } else if (dimension == "threads") {
      threads.clear();
      const uint32_t cores = std::max(1u, std::thread::hardware_concurrency());
      for (uint32_t t = 1; t < cores; t *= 2) threads.push_back(t);
      threads.push_back(cores);
    } else {
      throw InputError("tilefire bench: --sweep takes policy, granularity and threads, comma-separated; got '" + dimension + "'");
    }
  }
  // Both files are opened before the first cell runs, so that a path that cannot be written fails at once
  // (and leaves neither behind), not after the sweep.
  std::ofstream csv(out_prefix + ".csv"), markdown(out_prefix + ".md");
  if (!csv || !markdown) {
    std::error_code ignored;
    if (csv) std::filesystem::remove(out_prefix + ".csv", ignored);
    if (markdown) std::filesystem::remove(out_prefix + ".md", ignored);
    throw InputError("tilefire bench: --sweep-out: cannot write " + out_prefix + ".csv and .md");
  }
  csv << "policy,granularity,threads,dataflow_ms,bsp_ms,bsp_over_dataflow\n";
  std::ostringstream table;
  table << "| policy | granularity | threads | dataflow ms | bsp ms | bsp / dataflow |\n|---|---|---|---|---|---|\n";
  for (const std::string& policy : policies)
    for (Granularity granularity : granularities)
      for (uint32_t t : threads) {
        EngineOptions o = base;
        o.policy = policy;
        o.granularity = granularity;
        o.threads = t;
        Engine engine(o);
        uint64_t launches = 0;  // cpu: none
        std::vector<double> dataflow, bsp, ratios;
        for (uint32_t r = 0; r < rounds; ++r) {  // interleaved, the order flipping every round
          const bool bsp_first = r % 2 == 1;
          const double b0 = bsp_first ? median(time_decode(engine, Schedule::bsp, 8, steps, &launches)) : 0;
          const double d = median(time_decode(engine, Schedule::dataflow, 8, steps, &launches));
          const double b = bsp_first ? b0 : median(time_decode(engine, Schedule::bsp, 8, steps, &launches));
          dataflow.push_back(d);
          bsp.push_back(b);
          ratios.push_back(b / d);
        }
        char line[256];
        std::snprintf(line, sizeof(line), "%s,%s,%u,%.4f,%.4f,%.3f\n", policy.c_str(), granularity_name(granularity), t, median(dataflow),
                      median(bsp), median(ratios));
        csv << line;
        std::snprintf(line, sizeof(line), "| %s | %s | %u | %.4f | %.4f | %.3f |\n", policy.c_str(), granularity_name(granularity), t,
                      median(dataflow), median(bsp), median(ratios));
        table << line;
      }
  markdown << table.str();
  csv.close();  // a full disk shows only once the buffers are written
  markdown.close();
  if (!csv || !markdown) throw InputError("tilefire bench: --sweep-out: failed writing " + out_prefix + ".csv and .md");
  std::printf("%s", table.str().c_str());
  std::printf("(%u interleaved rounds of %u decode steps per cell; bsp / dataflow above 1: dataflow faster)\n"
              "written: %s.csv, %s.md\n", rounds, steps, out_prefix.c_str(), out_prefix.c_str());
  return 0;
}

}  // namespace tilefire::cli
