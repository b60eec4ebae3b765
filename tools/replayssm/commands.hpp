// Subcommand registration of the replayssm CLI. Each register_* adds one subcommand whose callback calls
// library functions and sets the process exit code through `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

namespace replayssm::cli {

extern int exit_code;

void register_fixtures(CLI::App& app);  // fixtures generate
void register_check(CLI::App& app);     // check FIXTURE_OR_DIR...
void register_fuzz(CLI::App& app);      // fuzz
void register_conform(CLI::App& app);   // conform (the main job)
void register_bench(CLI::App& app);     // bench (fuzz throughput; GPU kernels when built with CUDA)

}  // namespace replayssm::cli
