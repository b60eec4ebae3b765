// replayssm/reference/trace.hpp — trace fixtures (op "lifecycle.trace", docs/fixture-format.md section 9): a
// command sequence at the level of the Target interface (setup, allocate, step, commit, copy_slot) with the
// oracle's results, so an implementation can be judged by replaying the file alone, without the engine, the
// oracle or a build of this project (the Python kit does it: replayssm_kit.trace).
//
// After every command a trace states what the judge checks (docs/lifecycle.md): the step's outputs, the
// committed state of every resident slot in every layer (the oracle's values), the slots that must stay
// bitwise unchanged (the write-set rule) and, for a commit, the slots whose n = 0 left them unchanged since
// before the step. Recording: recording_target.hpp; checking an implementation: trace_replay.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "replayssm/fixture.hpp"
#include "replayssm/reference/command.hpp"
#include "replayssm/reference/target.hpp"

namespace replayssm::ref {

inline constexpr const char* kTraceOp = "lifecycle.trace";
// __metadata__.trace_version "MAJOR.MINOR": readers refuse an unknown major or minor. 1.0: eager steps under
// the minus_one PAD convention. 1.1 adds captured steps (`live_rows`, rows with `graph_tail`: PAD rows whatever
// their slot says) and the null_block / pad_slot conventions (`__metadata__.pad_convention`, equal to the
// setup's); a 1.0 reader would take tail rows or another convention's PAD rows as live, so a trace that uses
// neither is still written as 1.0 (docs/fixture-format.md 9.2). 1.2 adds `capture` commands (a CUDA-graph
// bucket captured while requests are live, Target::capture); a 1.1 reader would skip or misread them, so only a
// trace holding a capture is written as 1.2.
inline constexpr int kTraceMajor = 1, kTraceMinor = 2;
// __metadata__.pad_rule: the oracle writes zeros for PAD rows; they are compared (exact zeros) only for an
// implementation that claims pad_outputs_zero (docs/target-protocol.md, "PAD rows").
inline constexpr const char* kPadRuleZerosIfClaimed = "zeros_if_claimed";

// The semantic annotation of a step row: the request it belongs to (-1 for a PAD row) and, for a verify row,
// the early-stop position s (1..n: the commit is trimmed to s tokens and the request ends; 0: none).
struct TraceRowNote {
  std::int32_t request = -1;
  std::int32_t stop_at = 0;
};

struct StateExpectation {
  std::int32_t layer = 0;
  std::int32_t slot = 0;
  std::vector<float> values;  // the oracle's committed state (HV*K*V, cfg.layout), state dtype values
};

struct TraceCommand {
  enum class Op : std::uint8_t { Allocate, Step, Commit, CopySlot, Capture };
  Op op = Op::Allocate;
  std::int32_t slot = -1;            // allocate
  std::int32_t src = -1, dst = -1;   // copy_slot
  // capture (1.2): the captured bucket, `capture_rows` rows in [1, max_rows] of `capture_T` tokens in
  // [1, max_T]; it writes nothing (under pad_slot only the pad slot), so `unchanged` lists every other slot.
  std::int32_t capture_rows = 0, capture_T = 0;
  // step / commit: the batch as the protocol sends it (a step's verify rows carry accepted = 0, its prefill
  // rows T; a commit's verify rows the committed n, already trimmed by an early stop).
  std::vector<TargetRow> rows;
  std::vector<TraceRowNote> notes;                 // per row (step and commit)
  std::vector<SequenceInputs> inputs;              // step: per layer, total_tokens packed tokens
  std::vector<std::vector<float>> outputs;         // step: per layer o [N, HV, V], act dtype values
  // After the command:
  std::vector<StateExpectation> states;            // committed state of every resident, settled slot
  std::vector<std::int32_t> unchanged;             // slots whose state part is bitwise unchanged by the command
  std::vector<std::int32_t> kept;                  // commit: n = 0 slots and read slots of out-of-place commits,
                                                   // bitwise unchanged since before the step
  std::int32_t lifecycle = -1;                     // the lifecycle command (Trace::lifecycle) it belongs to

  std::int32_t live_rows() const;                  // rows before the graph tail (all rows of an eager batch)
  std::string op_name() const;                     // "allocate", "step", "commit", "copy_slot", "capture"
  std::string str() const;                         // one line: "commit [slot 2 n=3, ...]"
};

struct Trace {
  EngineSetup setup;                   // layer parameters and poison included
  std::vector<Cmd> lifecycle;          // the lifecycle commands the target calls came from
  std::vector<TraceCommand> commands;
  std::uint64_t seed = 0;              // the seed of the generator (0 for an exported fuzz case)
  std::string source;                  // how the trace was made (a command line, a dump path)
};

// The fixture of a trace: validated and written like any fixture (save_fixture). Every out.* tensor has the
// tolerance "exact": the oracle that wrote them reproduces them bit for bit; implementations are judged at
// the tier they claim (trace_replay.hpp).
Fixture trace_to_fixture(const Trace& t);
// Reads a trace back. Error naming the field: "__metadata__.trace_version" (an unknown major),
// "__metadata__.commands[7].rows[2].slot", "tensor 'out.12.o'", ... (a shape, a dtype, a missing tensor, an
// expectation that is not finite, an out.* tensor no command refers to).
Trace trace_from_fixture(const Fixture& f);
// True when a verify row of the trace commits out of place (write_slot != slot): only an implementation claiming
// out_of_place_commit is judged on it (the others: not covered).
bool trace_commits_out_of_place(const Trace& t);
// True when a step of the trace is a captured batch (rows with graph_tail).
bool trace_has_graph_tail(const Trace& t);
// True when the trace holds a capture command (1.2).
bool trace_has_capture(const Trace& t);
// "1.2" when the trace holds a capture, else "1.1" when it has a graph tail or a PAD convention other than
// minus_one, else "1.0": a trace is written at the lowest version that holds it, so older traces keep their bytes.
std::string trace_version_of(const Trace& t);
// "" when `target` is judged on the trace, else why it is not covered: a model configuration or window it
// excludes (Target::unsupported), a copy_slot it does not implement, an out-of-place commit without
// out_of_place_commit, a graph tail without graph_padding, a capture without captures, a PAD convention it
// does not follow.
std::string trace_not_covered(const Trace& t, const Target& target);
Trace load_trace(const std::string& path);

}  // namespace replayssm::ref
