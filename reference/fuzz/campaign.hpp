// Fuzz campaigns over the lifecycle model: the engine behind `replayssm fuzz` and `replayssm conform`.
// A campaign generates RapidCheck command sequences for one model configuration, runs them through the
// judge (full-state oracle vs a target), shrinks the first failure, and dumps the shrunk sequence as a
// replayable safetensors file (metadata: setup, target, fault, commands; tensors: the layer parameters).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "coverage.hpp"
#include "envelope.hpp"
#include "fuzz_case.hpp"
#include "rc_campaign.hpp"
#include "replayssm/lifecycle/judge.hpp"

namespace replayssm::fuzz {

// Which gate ranges a campaign's cases draw (inputs.hpp): Mix = a quarter of the cases realistic, a quarter
// checkpoint (realistic gates, q, k, v at checkpoint sizes), chosen by the case seed, the rest benign;
// Benign / Realistic / Checkpoint = every case.
enum class GateMix : std::uint8_t { Mix, Benign, Realistic, Checkpoint };
GateMix parse_gate_mix(const std::string& s, const std::string& field);  // "mix", "benign", "realistic", "checkpoint"
// The gate range of the case with this seed under `mix`.
ref::GateRange case_gates(GateMix mix, std::uint64_t case_seed);
// Which cases carry the conv component (conv_component.hpp: W = 4, SiLU, no bias, windows in the activation
// dtype, as Qwen3-Next / Qwen3.5 / Kimi Linear ship it): Off none (the default), Mix a quarter (chosen by the
// case seed), On every case. A target that keeps no conv windows runs its cases without (not covered).
enum class ConvMix : std::uint8_t { Off, Mix, On };
ConvMix parse_conv_mix(const std::string& s, const std::string& field);  // "off", "mix", "on"
bool case_conv(ConvMix mix, std::uint64_t case_seed);

// The conv component of the cases that carry one (ConvMix): kernel size W, the window's state dtype (nullopt: the
// model's activation dtype), activation and bias. The default is the shipped models' (W = 4, SiLU, no bias).
struct ConvShape {
  int kernel_size = 4;
  std::optional<DType> state_dtype;
  ref::ConvActivation activation = ref::ConvActivation::Silu;
  bool bias = false;
};

struct FuzzOptions {
  std::string target = "replay";   // a target kind (ref::target_kinds())
  ModelConfig cfg;                 // model (num_layers already applied)
  std::uint64_t seed = 1;
  int cases = 100;
  int max_commands = 100;          // RapidCheck max_size: longest command sequence
  int num_slots = 6;
  int max_T = 4;                   // the widest window a case may draw (the claimed max_T caps it)
  Narrowing narrowing;             // configuration dimensions fixed by the CLI; the others are drawn per case
  ref::Reconstruction recon = ref::Reconstruction::Serial;
  DType ring_record_dtype = DType::F32;
  ref::Fault fault = ref::Fault::None;
  GateMix gates = GateMix::Mix;
  ConvMix conv = ConvMix::Off;
  ConvShape conv_shape;            // the conv component of the cases that carry one
  bool self_checks = true;         // self checks in every case of a target that copies slots (self_check.hpp)
  std::string dump_dir;            // where a failing case is written ("" = current directory)
  CampaignControl control;         // shrink budget, time budget, watchdog (rc_campaign.hpp)
};

struct FuzzReport {
  std::string target;
  std::string op;                  // the campaign's op ("gdn", "kda")
  bool covered = true;             // false: the target's capabilities exclude this campaign (nothing was run)
  std::string not_covered;         // why not, or what the campaign left out (e.g. copies)
  int cases_passed = 0;
  bool failed = false;
  std::string reason;              // first disagreement of the shrunk case
  std::string check;               // the judge's check that failed it (ref::to_string(Check)), "" for an error
  std::string call;                // the call it judged: "step", "commit", a command kind, or "bookkeeping"
  std::string counterexample;      // RapidCheck's description of the shrunk case
  // The shrunk case's commands as the judge executed them (Cmd::str), ending with the failing one: the generated
  // sequence with the captures, self checks and graph replays the case inserted into it.
  std::vector<std::string> sequence;
  std::string reproduce;           // RC_PARAMS reproduce string
  std::string dump_path;           // replayable safetensors file of the shrunk case
  double seconds = 0;
  double cases_per_second = 0;
  std::string ended_by;            // "" when the campaign ran to its end; else the budget or signal that ended it
  int shrink_steps = 0;            // shrink candidates run after the first failure
  Envelope envelope;               // what the target claims on the campaign's configuration (narrowed)
  Coverage coverage;               // what the campaign's cases exercised (shrinking not counted)
  nlohmann::json to_json() const;
};

// Runs the campaign; progress lines (one per case) go to `progress` when non-null.
FuzzReport run_fuzz(const FuzzOptions& opt, std::ostream* progress);

// A dumped failing case as stored (fuzz_case.hpp): the setup (layer parameters included, pools NaN-poisoned),
// the target and fault it was judged with, the shrunk command sequence (ending with the failing command) and
// the reason.
using DumpedCase = FuzzCase;
// Reads a dump as strictly as a fixture (read_fuzz_case); Error naming the field for a malformed one.
DumpedCase load_dump(const std::string& path);

// Re-executes a dumped failing case; returns the first disagreement ("" if it no longer fails). A case judged
// against an implementation in its own process ("exec:COMMAND") is replayed only against the target given
// here: a command is never taken from a file (Error("target") when none is given); `notes` receives a line
// when the given target differs from the recorded one.
std::string replay_dump(const std::string& path, const std::string& target = "", std::string* notes = nullptr);

}  // namespace replayssm::fuzz
