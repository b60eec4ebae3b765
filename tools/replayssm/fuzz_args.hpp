// The campaign flags and the report format shared by `replayssm fuzz` and `replayssm conform` (fuzz_args.cpp):
// one set of options, one translation into fuzz::FuzzOptions, one way of printing a campaign's result.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "campaign.hpp"
#include "shard.hpp"

namespace replayssm::cli {

// The campaign flags as parsed; the defaults are `fuzz`'s (conform lowers cases and max_commands).
struct FuzzArgs {
  std::string target = "reference";
  std::string preset = "qwen3.5";
  int layers = 2;
  int cases = 100;  // the property suite's budget: every catalogue fault is caught at it
  int max_commands = 100;
  int slots = 6;
  int max_T = 12;  // the widest window drawn; the target's claimed max_T caps it (envelope.hpp)
  std::uint64_t seed = 1;
  std::string recon = "serial";
  std::string ring_dtype = "F32";
  std::string gates = "mix";  // mix (a quarter of the cases realistic), benign or realistic (inputs.hpp)
  std::string conv = "mix";   // off, mix (a quarter of the cases) or on: the conv component (conv_component.hpp)
  std::string self_checks = "on";  // on or off: self checks (the implementation against itself) in every case
  std::string dims;           // "H,HV,K,V": the preset's heads and dims replaced (--dims); "" = the preset's
  std::string fault = "none";
  std::string dump_dir = ".";
  fuzz::Requirements requirements;
  fuzz::CampaignControl control;  // --shrink-steps, --shrink-seconds, --no-shrink, --time-budget, --time-limit  // what a verdict needs (--min-cases-per-value, --min-rows, --exhaustive-accepted)
  double target_timeout = 60;  // seconds per command of an exec: target
  double target_startup_timeout = 300;  // seconds an exec: target or engine may take to answer hello
  // Overrides of the preset's model configuration (empty: the preset's own value), so that an implementation
  // whose capabilities exclude the preset's defaults (another l2norm form, F32 activations, the kv layout, ...)
  // can still be judged at the preset's dimensions.
  std::string l2norm, act_dtype, state_dtype, layout, kda_gate;
  std::string shard;           // "I/N" (--shard); "" = GTEST_SHARD_INDEX / GTEST_TOTAL_SHARDS, else unsharded
  // --export-trace FILE of `fuzz` (set by that command): it restricts what is generated to what a trace records,
  // so it is part of the command that reruns the campaign.
  std::string export_trace;
};

// Adds --preset, --layers, --cases, --max-commands, --slots, --max-T, --seed, --recon, --ring-dtype, --gates, --conv,
// --dump-dir, --target-timeout, --shard and the configuration overrides (--l2norm, --act-dtype, --state-dtype,
// --layout, --kda-gate) to c, bound to a (--target and --fault are added by each command, with its own help text).
void add_fuzz_options(CLI::App* c, FuzzArgs& a);

// The campaign options of `a` for one target (layers capped at the preset's; this shard's cases and seed,
// shard.hpp); also sets the exec: targets' per-command timeout. Throws Error naming the flag for an unknown
// preset, negative layers, an unknown recon, ring dtype or fault, a timeout <= 0, an unknown override value.
fuzz::FuzzOptions options_for(const FuzzArgs& a, const std::string& target);
// Sets the exec: per-command timeout and start-up budget from --target-timeout / --target-startup-timeout.
void set_exec_timeouts(const FuzzArgs& a);

// The targets a --target value stands for: "reference" means both reference designs (replay and ring), and with
// an injected fault only those in which the fault exists; any other name stands for itself.
std::vector<std::string> targets_for(const std::string& target, const std::string& fault = "none");

// The configuration overrides of `a` as flags (" --l2norm div_sqrt ..."), empty when there are none.
std::string overrides(const FuzzArgs& a);

// s quoted for a POSIX shell when it needs quoting (so a printed command line can be pasted back).
std::string shell_quote(const std::string& s);

// Where per-case progress lines go: stderr on an interactive terminal, nowhere otherwise (carriage returns make
// one endless line in CI logs).
std::ostream* progress_stream();

// The shard `a` runs: --shard, else the GTEST_* variables, else 0/1.
fuzz::Shard shard_of(const FuzzArgs& a);
// The `replayssm fuzz` command line that runs the whole campaign of `target` (every flag spelled out), and
// the one that reruns this shard of it (the same plus --shard I/N when sharded).
std::string campaign_command(const FuzzArgs& a, const std::string& target);
std::string rerun_command(const FuzzArgs& a, const std::string& target);
// A campaign's JSON record: r.to_json() plus preset, fault, shard, seed and cases of this shard,
// campaign_seed and campaign_cases of the whole campaign, and the campaign and rerun command lines.
nlohmann::json campaign_record(const fuzz::FuzzReport& r, const FuzzArgs& a);

// Prints one campaign's result line; after a failure also the reason, how to replay the shrunk case, the
// command that reruns the campaign (flags from `a`) and RapidCheck's shrunk counterexample.
void print_report(const fuzz::FuzzReport& r, const FuzzArgs& a);

}  // namespace replayssm::cli
