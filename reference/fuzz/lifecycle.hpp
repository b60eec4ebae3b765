// Stateful (model-based) generation of engine command sequences with RapidCheck (rc::state), shared by
// the property tests and `replayssm fuzz`. The abstract model tracks only what is needed to generate valid
// commands (which requests run, prefill, finished or were preempted; which slots are free); the judge
// (engine.hpp) does all checking.
#pragma once

#include <rapidcheck.h>
#include <rapidcheck/state.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "replayssm/lifecycle/judge.hpp"

namespace replayssm::fuzz {

// The verify widths (1 + num_draft) engines ship with MTP / EAGLE drafts (num_draft 1..7, and 11); the generator
// draws them with extra weight (those < max_T, and max_T itself), besides any width in [1, max_T], so that every
// narrow width gets rows enough to commit each of its accepted counts even when max_T is wide (docs/lifecycle.md,
// "Verdict levels").
inline constexpr int kVerifyWidths[] = {2, 3, 4, 5, 6, 7, 8, 12};

struct ModelRequest {
  enum class Status { Running, Finished, Preempted } status = Status::Running;
  std::int32_t slot = -1;
  std::int32_t committed = 0;  // tokens committed since the last fresh start
  std::int32_t pending = 0;    // tokens still to prefill
  bool fresh = true;
};

struct LifecycleModel {
  std::int32_t num_slots = 4;
  std::int32_t max_T = 4;
  bool allow_copy = true;  // false: the target does not implement copy_slot (Target::implements_copy)
  std::int32_t reserved_slot = -1;  // never allocated: the PAD convention's null block or pad slot (-1: none)
  bool graph = false;               // steps may run as captured batches (Target::graph_padding)
  std::int32_t max_rows = 0;        // capacity of a captured batch (EngineSetup::max_rows)
  bool out_of_place = false;        // verify rows may commit into another slot (Target::out_of_place_commit)
  ref::StepMix step_mix;            // what one step may mix (Target::step_mix; EngineSetup::step_mix)
  std::int32_t next_id = 0;
  std::map<std::int32_t, ModelRequest> reqs;
  std::set<std::pair<std::int32_t, std::int32_t>> captured;  // buckets (rows, T) captured so far: the replayable ones
  std::vector<std::int32_t> free_slots() const;
  std::vector<std::int32_t> with_status(ModelRequest::Status s) const;
  // What command c does to the requests, by this model's own rules (written apart from ref::Engine, which
  // it is checked against after every command). c must be valid for the model.
  void apply(const ref::Cmd& c);
};

// "" when the engine's request table agrees with the model's (committed and pending token counts,
// residency, slot, finished or preempted), else the first disagreement.
std::string bookkeeping_disagreement(const LifecycleModel& want, const ref::Engine& engine);

struct LifecycleSut {
  ref::Judge judge;
  std::string failure;  // description of the first disagreement (empty while all agree)
  bool bookkeeping = true;  // the independent model's check (Check::Bookkeeping) is on
  bool bookkeeping_failed = false;
};

// How a run is judged beyond the defaults: at a precision tier (Judge's judge_tier), and where the failing
// value comparison (report and tolerance) of the last failure is stored.
struct LifecycleJudging {
  std::optional<Tier> tier;
  // The setup a failing case ran with (its PAD convention is drawn per case among the target's).
  ref::EngineSetup* failed_setup = nullptr;
  std::optional<CompareReport>* failed_comparison = nullptr;
  Tolerance* failed_tolerance = nullptr;
  // Checks turned off (the judge's teeth test only; Check::Bookkeeping is the generator model's own check), and
  // where the failing check and call of the last failure are stored ("bookkeeping" for the model's check).
  std::set<ref::Check> disabled;
  std::optional<ref::Check>* failed_check = nullptr;
  std::string* failed_call = nullptr;
  // What the case exercised and the setup it ran with (its PAD convention drawn), stored whether it passed or not.
  ref::JudgedWork* work = nullptr;
  ref::EngineSetup* ran_setup = nullptr;
  // Self checks (self_check.hpp) in the case, for a target that copies slots: off only where a test isolates the
  // other checks (the judge's teeth) or a user asks (fuzz --self-checks off).
  bool self_checks = true;
};

// Runs one generated command sequence (call inside a RapidCheck property). The case's PAD convention is drawn
// among those the target follows (Target::pad_conventions) and replaces setup's; captured steps with graph
// tails are generated only for a target that claims graph_padding. On the first disagreement it records the
// failure, stores the executed sequence in *last_failure (if non-null) and fails the property.
void check_lifecycle(const ref::EngineSetup& setup, const std::string& target, ref::Fault fault,
                     std::vector<ref::Cmd>* last_failure = nullptr, std::string* last_reason = nullptr,
                     const LifecycleJudging& judging = {});

// A command sequence drawn from the generator of check_lifecycle (same model, weights and edge cases),
// deterministic in (seed, size): size bounds the sequence length as a campaign's --max-commands does. Trace
// fixtures are made from it (trace_gen.hpp).
// out_of_place: a quarter of the verify rows commit into a free slot (as for a target claiming
// out_of_place_commit). reserved_slot: a slot never allocated (the null_block or pad_slot convention's
// EngineSetup::reserved_slot(), -1 for none). graph_rows > 0: steps may run as captured batches of up to that many
// rows with a stale or PAD tail (as for a target claiming graph_padding; EngineSetup::max_rows()). step_mix: only
// steps that mix no more than it allows (a target's Target::step_mix); the default mix draws exactly as before.
std::vector<ref::Cmd> generate_commands(std::int32_t num_slots, std::int32_t max_T, bool allow_copy,
                                        std::uint64_t seed, int size, bool out_of_place = false,
                                        std::int32_t reserved_slot = -1, std::int32_t graph_rows = 0,
                                        ref::StepMix step_mix = {});

// Replays a recorded command sequence on a fresh judge, with the bookkeeping model checked after every
// command as in check_lifecycle; returns the first disagreement or "".
std::string replay_sequence(const ref::EngineSetup& setup, const std::string& target, ref::Fault fault,
                            const std::vector<ref::Cmd>& cmds, const std::set<ref::Check>& disabled = {},
                            std::size_t* failed_at = nullptr, std::string* failed_call = nullptr);

}  // namespace replayssm::fuzz
