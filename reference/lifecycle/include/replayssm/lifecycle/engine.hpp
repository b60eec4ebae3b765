// replayssm/lifecycle/engine.hpp — the lifecycle model: a small serving engine that runs command sequences
// (command.hpp: prefill chunks, mixed spec/decode steps, early stop, finish, continuation, copy,
// preemption/resume, slot reuse) on a Target (target.hpp). The judge (judge.hpp) runs the same sequence on
// the full-state oracle and on an implementation under test.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "replayssm/lifecycle/call_rules.hpp"
#include "replayssm/lifecycle/command.hpp"
#include "replayssm/lifecycle/fault.hpp"
#include "replayssm/recurrence/gdn.hpp"
#include "replayssm/lifecycle/target.hpp"

namespace replayssm::ref {

// Seeded token inputs of one layer for `T` new tokens (layer-specific stream of `seed`), gates from `gates`.
SequenceInputs token_inputs(const ModelConfig& cfg, std::int32_t layer, std::int32_t T, std::uint64_t seed,
                            GateRange gates = GateRange::Benign);

// The engine: request table, slot use and the accepted-length bookkeeping, driving one Target.
class Engine {
 public:
  // bookkeeping_fault: only Fault::EarlyStopCommitsWholeRun, Fault::StopTokenPlusOne and Fault::RequestStaysAfterStop
  // act here (the engine trims accepted runs and ends stopped requests). A setup with `conv` needs a target that claims Target::conv_state (Error("setup.conv")).
  Engine(std::unique_ptr<Target> target, const EngineSetup& setup, Fault bookkeeping_fault = Fault::None);

  struct Request {
    std::int32_t slot = kPadSlot;          // kPadSlot when not resident
    bool finished = false;
    std::vector<SequenceInputs> history;   // per layer: committed tokens since the last fresh start
    std::vector<std::int32_t> segments;    // token counts of each committed call since the last fresh start
    std::vector<SequenceInputs> pending;   // per layer: tokens still to prefill
    bool pending_fresh = false;            // the next prefill chunk starts from a zero state
  };

  // Executes one command; returns the outputs of a Step (per layer, packed as the step built them).
  // A command that does not fit the request table (unknown request, slot in use, ...) is Error("cmd...").
  std::vector<std::vector<float>> execute(const Cmd& c);
  // A Step command in its two target calls, so that a judge can check between them (call_rules.hpp):
  // begin_step runs Target::step (and conv_step) and returns the outputs, finish_step runs Target::commit (and
  // conv_commit) and records what each row committed. execute(step) is begin_step then finish_step; between
  // them the request table is as before the step, last_step_writes() holds the step's write set and in-flight
  // slots, and only finish_step may follow (Error("cmd") otherwise).
  std::vector<std::vector<float>> begin_step(const Cmd& c);
  void finish_step();
  bool step_in_progress() const { return in_step_.has_value(); }
  const StepWrites& last_step_writes() const { return step_writes_; }
  const std::map<std::int32_t, Request>& requests() const { return requests_; }
  const Target& target() const { return *target_; }
  const EngineSetup& setup() const { return setup_; }
  // The slots the last command was allowed to write (all others must stay bitwise unchanged), and the
  // slots whose bytes must not change either because their commit had n = 0 (for non-ring targets). Under
  // the pad_slot convention every step may write the dedicated pad slot (its contents are don't-care).
  const std::vector<std::int32_t>& last_written() const { return last_written_; }
  const std::vector<std::int32_t>& last_kept() const { return last_kept_; }
  // The read slots of the last step's out-of-place commits: bitwise unchanged on every target.
  const std::vector<std::int32_t>& last_read_only() const { return last_read_only_; }
  // Token layout of the last step: per row (in batch order, PAD rows included) its offset and length.
  struct PackedRow {
    std::int32_t req;  // -1 for PAD and graph tail rows
    std::int32_t offset, T;
    bool prefill = false;  // a prefill chunk (committed by the step itself), else a verify row or PAD
    bool graph_tail = false;      // a PAD row of a captured batch's tail
    bool stale_tail = false;      // ... that carries a stale slot id of an earlier, larger batch
    bool out_of_place = false;    // a verify row committing into another slot
    std::int32_t accepted = -1;   // a verify row's committed length, set by finish_step (-1 before)
    bool early_stop = false;      // a verify row whose stop token was accepted
  };
  const std::vector<PackedRow>& last_rows() const { return last_rows_; }
  // The last step's rows in canonical form (PAD and graph tail rows kPadSlot): at step time verify rows carry
  // accepted 0, after finish_step their committed counts.
  const std::vector<TargetRow>& last_target_rows() const { return last_target_rows_; }
  // The packed tokens of the last step per layer (what Target::step received), and with the conv component on
  // (EngineSetup::conv) the conv outputs the target's conv_step returned for them (per layer [total_tokens, C]).
  const std::vector<SequenceInputs>& last_inputs() const { return last_inputs_; }
  const std::vector<std::vector<float>>& last_conv_outputs() const { return last_conv_outputs_; }

  // The last self check's two paths, per row in the command's order (a SelfCheck command, self_check.hpp; empty
  // after any other command).
  struct SelfCheckRow {
    std::int32_t req = 0, slot = kPadSlot;             // the forked request and its slot
    std::int32_t fork = kPadSlot;                       // the free slot both paths ran in (a fresh copy each)
    std::int32_t T = 0, accepted = 0;                   // the window and the row's accepted field
    std::int32_t committed = 0;                         // the count each path committed (T for verify_vs_steps, chunks)
    std::vector<SequenceInputs> tokens;                 // [layer] the row's T tokens
    std::vector<std::vector<float>> out_a, out_b;       // [layer] outputs [T, HV, V] of each path
    std::vector<std::vector<float>> state_a, state_b;   // [layer] the committed state after each path
    std::vector<std::vector<float>> conv_a, conv_b;     // [layer] the committed conv window after each path (conv on)
  };
  const std::vector<SelfCheckRow>& last_self_check() const { return last_self_check_; }

  // Recomputes a request's committed state from its history with the plain recurrence (zero start state,
  // rounding to the state dtype at the end of every committed call): the oracle's own self-check.
  std::vector<float> recompute(std::int32_t req, std::int32_t layer) const;

 private:
  // One step as the target sees it: rows in batch order (PAD rows inserted), each row's request (-1: PAD)
  // and new tokens, and the tokens packed per layer.
  struct PackedStep {
    std::vector<TargetRow> rows;
    std::vector<const RowSpec*> spec;                  // per row; nullptr for PAD rows
    std::vector<std::vector<SequenceInputs>> tokens;   // [row][layer]
    std::vector<SequenceInputs> packed;                // [layer]
  };

  Request& request(std::int32_t id);
  void check_free_slot(std::int32_t slot) const;
  // Invalidates a request's private state: it re-prefills its retained history (+ extra tokens) from zero.
  void start_fresh(Request& r, std::int32_t slot, const std::vector<SequenceInputs>& extra);
  std::vector<SequenceInputs> new_tokens(std::int32_t T, std::uint64_t seed) const;

  void admit(const Cmd& c);
  void finish(const Cmd& c);
  void continue_turn(const Cmd& c);
  void copy(const Cmd& c);
  void preempt(const Cmd& c);
  void resume(const Cmd& c);
  void clear_last();
  // A CUDA-graph bucket captured while requests are live (Target::capture): it changes no request.
  void capture(const Cmd& c);
  // A self check (self_check_run.cpp): forks every row's request into its free slot and runs both paths there.
  void self_check(const Cmd& c);
  std::vector<SelfCheckRow> last_self_check_;

  PackedStep pack_step(const Cmd& c) const;
  // Pads a packed step to the captured size c.graph (graph_tail rows: the persistent buffer's stale rows or
  // PAD rows, their windows of dummy tokens after the live ones).
  void add_graph_tail(const Cmd& c, PackedStep& s, std::int32_t width) const;
  // The rows as the target receives them: PAD rows carry the setup's PAD sentinel.
  std::vector<TargetRow> wire_rows(const std::vector<TargetRow>& rows) const;
  // The accepted length each verify row commits: the sampled n, trimmed to the stop token on an early stop.
  std::int32_t commit_length(const RowSpec& rs) const;
  // Appends what each row committed to its request's history; ends requests whose stop token was accepted.
  void record_commits(const PackedStep& s);

  std::unique_ptr<Target> target_;
  EngineSetup setup_;
  Fault fault_;
  std::map<std::int32_t, Request> requests_;
  std::vector<std::int32_t> last_written_;
  std::vector<std::int32_t> last_kept_;
  std::vector<std::int32_t> last_read_only_;
  std::vector<PackedRow> last_rows_;
  std::vector<TargetRow> last_target_rows_;
  std::vector<SequenceInputs> last_inputs_;
  std::vector<std::vector<float>> last_conv_outputs_;
  std::optional<PackedStep> in_step_;  // the step between begin_step and finish_step
  Cmd in_step_cmd_;
  StepWrites step_writes_;
  // The persistent, capacity-sized index buffers of captured steps (max_rows() rows, kPadSlot for PAD): what
  // the last captured step of each size left in it, accepted counts included. One buffer (key 0) when a step
  // may mix widths; one per width under step_mix.one_width (a captured bucket is one width).
  std::map<std::int32_t, std::vector<TargetRow>> graph_buffers_;
  // The buckets (rows, T) captured so far in this case: the ones a step may replay (Cmd::replay_T).
  std::set<std::pair<std::int32_t, std::int32_t>> captured_;
  // Error("cmd....") unless c may replay its bucket: the target claims graph replay, the bucket was captured,
  // every row is a verify row of replay_T tokens (no request prefilling).
  void check_replay(const Cmd& c) const;
  // The width every row of a step of c has under step_mix.one_width (0 otherwise), after checking that c's
  // rows obey the setup's step mix; Error("cmd.rows...") for a step that mixes more.
  std::int32_t step_width(const Cmd& c) const;
};

}  // namespace replayssm::ref
