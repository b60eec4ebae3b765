// `replayssm fuzz --level engine`: the engine-level flags and their campaign (engine_fuzz.cpp).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "fuzz_args.hpp"

namespace replayssm::cli {

struct EngineLevelArgs {
  std::string level = "kernel";  // kernel (the Target protocol) or engine (request events)
  int max_live = 4;
  std::string commit = "both";   // same_iteration, next_step, or both (drawn per case)
  std::string buffers = "both";  // in_place, double, or both (drawn per case)
};

// Adds --level, --max-live, --commit and --buffers.
void add_engine_level_options(CLI::App* c, EngineLevelArgs& e);

// Runs the engine-level campaign for --target (engine:NAME or NAME; "reference" by default) with the shared
// flags of `a` (preset, layers, cases, max-commands, max-T, seed, fault, dump-dir); prints the report, writes
// the JSON report when `json_out` is set; returns the exit code.
int run_engine_level(const FuzzArgs& a, const EngineLevelArgs& e, const std::string& json_out,
                     const std::string& junit_out);
// The campaign alone: runs it, prints its lines, returns its record (with "level": "engine") for a report.
nlohmann::json engine_campaign(const FuzzArgs& a, const EngineLevelArgs& e);

}  // namespace replayssm::cli
