// Committed fixtures judged through an implementation in its own process ("exec:COMMAND"): the static fixtures
// of the fixture ops (recurrent, chunked, mtp_verify, replay_commit, mtp_batch; from protocol 1.3 the short
// convolution's conv.prefill, conv.update, conv.commit) through the protocol's `fixture` command, and the lifecycle traces through its lifecycle commands (trace_replay.hpp). This is what
// `replayssm conform --target exec:...` and `replayssm check --target exec:...` add to their verdicts.
//
// Judging a static fixture (docs/target-protocol.md, "Fixture ops"):
//   * every out.* tensor at the tier the implementation claims: tier_tolerance(tier, model, scale, state) with
//     scale = max|expected| of the compared elements and state = a state or pool tensor (the fixture's stored
//     tolerance is its fp32-tier bound; the report names both). A bit_exact claim is about the fp32 oracle and
//     does not apply: a fixture's expectations are the f64 truth rounded once;
//   * mtp_batch: the rows of out.o of PAD rows (in.slot = -1) must be exact +0 when the implementation claims
//     pad_outputs_zero and are don't-care otherwise (the PAD rule); the slots of out.pool no row writes (PAD rows, accepted n = 0, slots no
//     row reads) must be bitwise the input pool's, and the written slots are compared at the tier with the
//     scale of the written slots alone (the 1e30 markers of unused slots would otherwise set the scale);
//   * conv.* fixtures (no GDN/KDA model configuration): every out.* tensor at the fixture's stored tolerance
//     whatever the claimed tier (out.y's bound is derived for any fp32-arithmetic convolution; states are exact);
//     the implementation's act_dtypes, state_dtypes and max_T (for conv.update / conv.commit windows) apply;
//   * mrope.rotary (protocol 1.10): every out.* tensor at its stored tolerance (positions, delta, prompt length
//     exact; the rotary bound); mrope.session traces: their commands through the mrope_* commands, judged per token
//     (replayssm/mrope/mrope_session.hpp), covered when the implementation claims mrope with the trace's model;
//   * tree.* (protocol 1.11): every out.* tensor at its stored tolerance (tree.verify and tree.commit only for an
//     implementation claiming the fp32 tier, whose bound that is: their term scales are not derived yet);
//   * a fixture the implementation cannot run is "not covered", with the reason, never passed: its op is not
//     claimed (or it speaks a protocol version without the op: 1.0, below 1.3 for conv.*, below 1.10 for
//     mrope.*, below 1.11 for tree.*), its model configuration is outside the capabilities, or it is a ring-step
//     fixture (not a target operation: the protocol does not expose a ring's records).
// Failures name the tensor and the worst element (flat index, coordinates, expected, got).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "replayssm/compare.hpp"
#include "replayssm/tensor.hpp"

namespace replayssm::exec {

struct ExecTensorCheck {
  std::string name;          // "out.o", "out.pool (slots no row writes)", "command 12", ...
  Tolerance judged;          // what was applied
  std::string stored;        // the fixture's own tolerance ("" when it has none for this check)
  std::string check;         // a trace's failing check ("outputs", "pad", "state", "gap", "unchanged", "kept",
                             // "error"; trace_replay.hpp); "" for a tensor of a static fixture (its name says it)
  CompareReport report;
  // The worst element's excess over each bound: |got - ref| / bound at the worst element, over the bound applied
  // (tier) and over the fixture's stored tolerance (negative when there is none, or it is exact or RMS-only).
  double tier_excess = -1, stored_excess = -1;
  Shape shape;               // of the compared tensor (for the worst element's coordinates); empty: none
  std::string str() const;   // one line: verdict, worst element with coordinates, judged and stored tolerance
};

struct ExecFixtureResult {
  std::string path, op;
  std::string tier;          // the tier the implementation claims (what it was judged at)
  bool covered = true;       // false: not run; `why` names the capability that excludes it
  bool ok = false;           // covered and every check passed
  std::string why;           // not covered: the reason; else an error that stopped the check (refusal, misfit)
  std::vector<ExecTensorCheck> tensors;
  nlohmann::json to_json() const;
  std::string str() const;   // "PASS path (op, tier fp32)" / "FAIL ..." / "not covered ..." plus one line per check
};

// Judges one committed fixture file through the implementation behind COMMAND. Never throws: an unreadable
// fixture, a refusal or a misfit answer is a failed result naming the command and the field.
ExecFixtureResult check_fixture_through(const std::string& command, const std::string& path);

// Coordinates of a flat row-major index in `shape`, "[1, 0, 3]".
std::string coords_of(std::size_t flat, const Shape& shape);

}  // namespace replayssm::exec
