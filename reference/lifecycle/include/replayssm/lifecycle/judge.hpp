// replayssm/lifecycle/judge.hpp — the judge: runs every command on the oracle (full_state) and on the
// implementation under test, then checks, after every command:
//   1. outputs: real rows equal (bit-exact or the target's tolerance); PAD rows exactly zero on the oracle
//      and on a target that claims zeros (Target::pad_outputs_zero), otherwise not compared; a NaN tripwire
//      on every output of every real row: the first non-finite value (on either side, where the other side's
//      is finite, or on the oracle's side at all) is reported with its absolute token position in the
//      request, the request's slot, the command's index in the run, the layer and (hv, v);
//   2. request tables: residency, slots, finished state and committed token counts agree;
//   3. committed states of every resident request in every layer, and the oracle against its own
//      recomputation from history;
//   4. slots outside the command's write set and the gaps after slots stay bitwise unchanged; commits with
//      n = 0 leave their slot's bytes unchanged (every target but the spec ring, whose cursors move instead);
//      the read slot of an out-of-place commit stays bitwise unchanged.
// A step is judged after each of its two target calls (call_rules.hpp), as a trace is: after `step` check 1
// (outputs) and check 5: 5a the committed state of every resident request that has no verify row in the step
// (its prefill chunk committed, nothing else) equal to the oracle's, 5b every slot outside the step's write set
// and every gap bitwise unchanged; after `commit` checks 2, 3, 4 and 6. Every other command is judged after
// its call with checks 2, 3, 4 (and 6).
// With the conv component (EngineSetup::conv, conv_component.hpp), then:
//   6. conv outputs of every real row against the per-request truth (conv_update from the request's committed
//      window before the step over the row's raw inputs), on both sides: bit-exact against the kernel-faithful
//      binary32 path for the oracle and a bit-exact target, else against the binary64 truth within
//      conv_output_bound (conv.hpp; docs/numerics.md, "Short convolution"), at every judged tier;
//      PAD rows' conv outputs exactly zero (oracle; a target that claims PAD zeros); every resident request's
//      committed window on both sides bit for bit against the truth of its history (the last W - 1 raw inputs,
//      rounded to the conv state dtype: data movement, exact at every tier); every conv window outside the
//      command's write set, every window whose commit had n = 0 (every design), the read slot of an
//      out-of-place commit and every gap bitwise unchanged.
// A self check (Cmd::Kind::SelfCheck, self_check.hpp) is judged after its last call with checks 2 and 4 (its forks
// are its write set) and:
//   7. the implementation against itself: for every row and layer, path A's outputs and committed state against
//      path B's, bit for bit where the target claims the check exact (Target::self_claim), else within
//      self_check_bound; the oracle's own two paths must pass the same bound (else the oracle or the bound is
//      wrong, reported as such); with the conv component, the two paths' committed conv windows bit for bit (data
//      movement). The forks' values are not compared with the oracle: every ordinary step is.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "replayssm/lifecycle/command.hpp"
#include "replayssm/lifecycle/engine.hpp"
#include "replayssm/lifecycle/term_scale_tracker.hpp"
#include "replayssm/tier.hpp"

namespace replayssm::ref {

// The judge's checks, each of which can be turned off alone (Judge's `disabled`): the teeth of the judge
// (property_tests/judge_teeth_test.cpp) prove that every one is needed by a catalogue fault that only it catches
// at that call, and docs/lifecycle.md ("The judge's checks") names that fault, or the check that implies it.
enum class Check : std::uint8_t {
  Outputs,             // 1: real rows' outputs
  PadZeros,            // 1: PAD rows' outputs exactly zero (oracle; a target claiming pad_outputs_zero)
  NanTripwire,         // 1: the first non-finite output, with its coordinates (implied by Outputs)
  Requests,            // 2: request tables
  States,              // 3: committed states of resident requests
  OracleSelfCheck,     // 3: the oracle against its recomputation from history (guards the oracle only)
  Untouched,           // 4: slots outside the command's write set
  Gaps,                // 4: the gaps after slots
  KeptAtZero,          // 4: a slot whose commit had n = 0 keeps its bytes
  ReadOnly,            // 4: the read slot of an out-of-place commit keeps its bytes
  StatesAfterStep,     // 5a: committed states between a step and its commit
  UntouchedAfterStep,  // 5b: slots outside the step's write set, and gaps, between a step and its commit
  ConvOutputs,         // 6: conv outputs against the per-request truth
  ConvWindows,         // 6: committed conv windows against the truth of each history
  ConvUntouched,       // 6: conv windows outside the write set, n = 0 and read slots, gaps
  Bookkeeping,         // the generator's independent bookkeeping model (reference/fuzz/lifecycle.cpp)
  SelfConsistency,     // 7: a self check's two paths of the implementation against each other
};
std::string to_string(Check c);                // "outputs", "pad_zeros", ...
Check parse_check(const std::string& s);       // Error("check") listing the names
std::vector<Check> all_checks();

// What the judged commands exercised on the implementation (Judge::work): the rows that reached it by kind,
// the verify widths with the accepted counts committed for each, and the commands and events of the run.
struct JudgedWork {
  long verify_rows = 0, prefill_rows = 0, pad_rows = 0;
  long stale_tail_rows = 0, pad_tail_rows = 0;  // graph tails of captured steps (their rows count as PAD too)
  long out_of_place_rows = 0, early_stops = 0, live_captures = 0;
  // Steps whose live rows mix widths, and steps with prefill chunks beside verify rows (StepMix).
  long mixed_width_steps = 0, prefill_verify_steps = 0;
  std::map<int, std::set<int>> accepted;         // verify width T -> accepted counts committed
  std::map<std::string, long> commands;          // command kind -> count ("admit", "step", ...)
  std::map<std::string, long> self_checks;       // self check kind -> count ("verify_vs_steps", ...)
  long self_check_rows = 0;                      // rows forked by self checks
  // Captured buckets replayed (protocol 1.9): the replayed steps, and those whose rows before the graph tail
  // (their slots, PAD rows -1), live row count or accepted counts differ from the same bucket's first replay (what a graph that kept a
  // value of its first replay gets wrong).
  long graph_replays = 0, replays_other_slots = 0, replays_other_live_rows = 0, replays_other_accepted = 0;
  // The closest a tolerance-based comparison came to its bound: the largest worst-element excess
  // (|got - ref| / bound) over the comparisons made, and what was compared there; 0 when everything was exact.
  double closest_excess = 0;
  std::string closest_at;
  // The same for the self checks' bounds (self_check.hpp), apart from the tier's.
  double self_closest_excess = 0;
  std::string self_closest_at;
  long real_rows() const { return verify_rows + prefill_rows; }
};

class Judge {
 public:
  // judge_tier: compare outputs and states at this precision tier's tolerance (tier.hpp) whatever the target
  // claims (the teeth test measures each fault against each tier's budget); empty: the target's own claim
  // (bit-exact, or its tolerance()).
  // disabled: checks not applied (the judge's own teeth test turns them off one at a time; never in a campaign).
  Judge(const EngineSetup& setup, const std::string& target_kind, Fault fault = Fault::None,
        std::optional<Tier> judge_tier = std::nullopt, std::set<Check> disabled = {});
  // Executes c on both; returns an empty string when everything agrees, else a description of the first
  // disagreement (which check, request, layer, worst element). An Error from the oracle means the command
  // itself is invalid and propagates.
  std::string apply(const Cmd& c);
  const Engine& oracle() const { return oracle_; }
  const Engine& sut() const { return sut_; }
  const std::vector<Cmd>& executed() const { return executed_; }
  // The value comparison that failed last (empty when the last disagreement was structural: request
  // tables, slots, errors), with the tolerance it was judged under.
  const std::optional<CompareReport>& failed_comparison() const { return failed_; }
  const Tolerance& failed_tolerance() const { return failed_tol_; }
  // The two tensors of that comparison (the oracle's, the implementation's; a state [HV, K, V] in the layout,
  // or a row's outputs [T, HV, V]), for drawing it (replayssm report html).
  struct FailedValues {
    std::vector<float> ref, got;
    bool state = false;
  };
  const std::optional<FailedValues>& failed_values() const { return failed_values_; }
  // The check that failed last and the call it judged ("step", "commit", or the command's kind); empty when
  // the last command passed or the implementation raised an error.
  const std::optional<Check>& failed_check() const { return failed_check_; }
  const std::string& failed_call() const { return failed_call_; }
  bool enabled(Check c) const { return !disabled_.count(c); }
  // What the commands applied so far exercised (the oracle engine's rows: both sides ran the same ones).
  const JudgedWork& work() const { return work_; }

 private:
  using Outputs = std::vector<std::vector<float>>;
  // Check 6 (judge_conv.cpp): windows_before[req][layer] is the truth of each request's window before c.
  using Windows = std::map<std::int32_t, std::vector<std::vector<float>>>;
  // Where each request stood before the command (committed tokens, slot): the NaN tripwire's coordinates.
  struct Before {
    std::int32_t position = 0, slot = -1;
  };
  std::string check_outputs(const Outputs& out_o, const Outputs& out_s, const std::map<std::int32_t, Before>& before,
                            const Cmd& c) const;
  std::string check_requests() const;
  std::string check_states() const;
  std::string check_untouched(const Cmd& c, const Outputs& pools_before_o, const Outputs& pools_before_s) const;
  // Check 5, between a step and its commit.
  std::string check_states_after_step() const;
  std::string check_untouched_after_step(const Cmd& c, const Outputs& pools_before_o, const Outputs& pools_before_s) const;
  // Runs `f` unless `check` is disabled; a failure is recorded as failed_check_ / failed_call_.
  template <class F>
  std::string run_check(Check check, const char* call, F&& f) const;
  // The checks after the command's last call (the commit of a step; the only call of any other command).
  std::string after_last_call(const Cmd& c, const char* call, const Outputs& before_o, const Outputs& before_s,
                              const Windows& windows_before, const Outputs& conv_before_o, const Outputs& conv_before_s);
  Windows conv_truth_windows() const;
  std::string check_conv(const Cmd& c, const Windows& windows_before, const Outputs& conv_before_o,
                         const Outputs& conv_before_s) const;
  std::string check_conv_outputs(const Windows& windows_before) const;
  std::string check_conv_windows() const;
  std::string check_conv_untouched(const Cmd& c, const Outputs& conv_before_o, const Outputs& conv_before_s) const;
  // Check 7 (judge_self.cpp): the last self check's paths, on the implementation and on the oracle.
  std::string check_self(const Cmd& c) const;
  // The term scales of every row and layer of the last self check ([row][layer]), from the oracle's run.
  std::vector<std::vector<TermScales>> self_check_scales(const Cmd& c) const;
  std::string compare_paths(const Engine& e, const Cmd& c, const SelfClaim& claim, const char* who,
                            const std::vector<std::vector<TermScales>>& scales) const;
  // term_scale: per element (empty when the comparison is exact).
  CompareReport compare_values(const std::vector<float>& ref, const std::vector<float>& got, bool state,
                               const std::vector<double>& term_scale) const;

  Engine oracle_;
  Engine sut_;
  std::optional<Tier> tier_;
  std::vector<Cmd> executed_;
  mutable std::optional<CompareReport> failed_;
  mutable std::optional<FailedValues> failed_values_;
  mutable Tolerance failed_tol_;
  std::set<Check> disabled_;
  // Per replayed bucket (rows, T): its first replay's rows before the graph tail as (slot, accepted), batch order.
  std::map<std::pair<std::int32_t, std::int32_t>, std::vector<std::pair<std::int32_t, std::int32_t>>> first_replays_;
  mutable JudgedWork work_;  // compare_values (const) records how close each comparison came to its bound
  bool scaled_ = false;         // tolerance-based judging: bounds per term scale
  TermScaleTracker scales_;
  std::vector<std::vector<double>> out_scales_;  // per layer, the last step's output term scales
  void count_work(const Cmd& c);
  mutable std::optional<Check> failed_check_;
  mutable std::string failed_call_;
};

}  // namespace replayssm::ref
