// replayssm/reference/trace_replay.hpp — judging a Target with a trace alone (trace.hpp): the recorded calls are
// made in order and, after each, the recorded expectations are checked as the judge checks them
// (docs/lifecycle.md): the step's outputs per real row (PAD rows: exact zeros when the target claims them),
// the committed state of every expected (layer, slot), gaps and the slots outside the write set bitwise
// unchanged, and a commit's n = 0 slots unchanged since before the step (every target but the spec ring).
// `replayssm check` runs the oracle through its own traces; the Python kit does the same for kit Targets.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "replayssm/reference/golden.hpp"
#include "replayssm/reference/trace.hpp"
#include "replayssm/tier.hpp"

namespace replayssm::ref {

// How values are compared: the target's own claim (bit_exact: exact, else its tolerance()), the trace's stored
// tolerance (exact: the oracle reproducing itself) or a precision tier (tier_tolerance; scale = max|ref| of
// the compared row window or state).
struct TraceJudging {
  enum class Mode { Claims, Stored, Tier } mode = Mode::Claims;
  Tier tier = Tier::Fp32;
};

struct TraceCommandResult {
  enum class Verdict { Pass, Fail, NotRun } verdict = Verdict::Pass;
  std::size_t index = 0;
  std::string command;          // TraceCommand::str()
  std::int32_t lifecycle = -1;  // index of the lifecycle command, and its description
  std::string lifecycle_text;
  std::string check;            // "error", "outputs", "pad", "state", "gap", "unchanged", "kept"
  std::int32_t layer = -1, slot = -1, row = -1;
  std::optional<CompareReport> report;  // the failing comparison (worst element), when there is one
  Tolerance tolerance;
  std::string message;          // one line: the command, the layer, slot or row, the worst element
};

struct TraceReport {
  bool ok = true;
  std::vector<TraceCommandResult> commands;
  const TraceCommandResult* first_failure() const;
};

// Replays `trace` through `target` (setup first). After the first failing command the rest are NotRun unless
// keep_going. Never throws for a failing target: its Errors are verdicts ("error").
TraceReport replay_trace(const Trace& trace, Target& target, const TraceJudging& judging = {},
                         bool keep_going = false);

// `replayssm check` for a trace file: the oracle (full_state) replayed through it at the stored tolerance, or
// at `tier` when given. Never throws: an unreadable trace is reported in FixtureCheck::error.
FixtureCheck check_trace_file(const std::string& path, std::optional<Tier> tier = std::nullopt);
// The same for a trace fixture already in memory (`path` is only reported).
FixtureCheck check_trace(const Fixture& f, const std::string& path, std::optional<Tier> tier = std::nullopt);

}  // namespace replayssm::ref
