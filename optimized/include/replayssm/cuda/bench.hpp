// replayssm/cuda/bench.hpp — the GPU kernel benchmark as a library: the ReplaySSM step (verify + payload
// capture + all-layer commit) against the full-state step (verify writing T states + commit copy), with the
// bytes each moves against a device-to-device copy measured in the same run. Both the replayssm_bench
// executable and `replayssm bench kernels` call it; the method is described in docs/cuda.md ("Benchmark").
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "replayssm/cuda/kernels.hpp"

namespace replayssm::cuda {

struct BenchOptions {
  std::string preset = "qwen3.5";
  std::vector<int> batches{1, 8, 32, 64, 128, 256};
  std::vector<int> Ts{2, 4, 8};
  int repeats = 15;                     // timed rounds per unit (medians reported), after 3 warm-up rounds
  int accept = -1;                      // accepted tokens n per row; -1: n = T (the most replay work)
  Schedule schedule = Schedule::Auto;   // of the verify and replay-commit launches
  std::string csv, md;                  // files for the CSV rows and the markdown table ("" = none)
};

// Parses the replayssm_bench command line (without the program name):
//   [--preset NAME] [--batches 1,8,...] [--T 2,4,8] [--accept n|all] [--repeats N]
//   [--schedule auto|per-tile|persistent] [--csv FILE] [--md FILE]
// Throws Error naming the argument on unknown arguments, missing or malformed values.
BenchOptions parse_bench_args(const std::vector<std::string>& args);

// Validates the options (Error naming the field), then runs the benchmark on device 0: the header and the
// table go to `out`, progress to `log`. Returns 0, or 2 with a message on `log` when no CUDA device is
// usable. Throws Error on a CUDA failure or when an output file cannot be written.
int run_bench(const BenchOptions& o, std::FILE* out, std::FILE* log);

// The replayssm_bench executable: parse_bench_args + run_bench; errors go to stderr. Returns the exit status
// (0; 1 on an error; 2 without a CUDA device).
int bench_main(int argc, char** argv);

}  // namespace replayssm::cuda
