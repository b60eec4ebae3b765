// Subcommand registration of the replayssm CLI. Each register_* adds one subcommand whose callback calls
// library functions and sets the process exit code through `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace replayssm {
enum class Tier : std::uint8_t;  // replayssm/tier.hpp (not included: its config.hpp names clash in cmd_mrope.cpp)
}

namespace replayssm::cli {

extern int exit_code;

void register_fixtures(CLI::App& app);  // fixtures generate / manifest (cmd_fixtures.cpp)
void register_check(CLI::App& app);     // check FIXTURE_OR_DIR... (cmd_fixtures.cpp)
void register_fuzz(CLI::App& app);      // fuzz (cmd_fuzz.cpp)
void register_conform(CLI::App& app);   // conform, the main job (cmd_conform.cpp)
void register_bench(CLI::App& app);     // bench: fuzz throughput; GPU kernels when built with CUDA (cmd_bench.cpp)
void register_mrope(CLI::App& app);     // mrope positions / presets (cmd_mrope.cpp)
void register_report(CLI::App& app);    // report merge: shards' JSON reports into one (cmd_report.cpp)
void register_conv(CLI::App& app);      // conv fuzz: the conv state's lifecycle campaign (cmd_conv.cpp)

// Fixture helpers of `check`, also used by `conform` (cmd_fixtures.cpp).
// Expands files and directories (recursively) into a sorted list of .safetensors files; Error("path") for a
// path that does not exist.
std::vector<std::string> collect_fixtures(const std::vector<std::string>& args);
// Checks every fixture and prints one line per fixture and per tensor (with `quiet`, failing fixtures only);
// stores the JSON results in *report when non-null and returns the number of failures.
// Traces are judged at `tier` when given (their stored tolerance otherwise).
int check_and_print(const std::vector<std::string>& files, nlohmann::json* report, bool quiet,
                    std::optional<Tier> tier = std::nullopt);

// The same through the implementation behind an exec: target's COMMAND (check_through.cpp): static fixtures
// through its `fixture` command, traces through its lifecycle commands, each judged at the tier it claims;
// what its capabilities exclude is counted as not covered (with `quiet`: failing fixtures in full, the not
// covered ones counted per reason).
struct ThroughCounts {
  int passed = 0, failed = 0, not_covered = 0;
};
ThroughCounts check_through_and_print(const std::string& command, const std::vector<std::string>& files,
                                      nlohmann::json* report, bool quiet);

}  // namespace replayssm::cli
