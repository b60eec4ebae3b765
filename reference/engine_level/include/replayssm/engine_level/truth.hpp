// replayssm/engine_level/truth.hpp — the engine-level oracle: per-request truth that knows no
// slots, rows or commit timing. Every request carries its own committed token history and its state, advanced
// by the full-state recurrence (mtp.hpp full_state_verify, StateRounding::AtCommit: the state rounded to the
// state dtype once per committed call); a verify window's outputs are read from the request's committed state.
// The same event rules as the engines' (event.hpp), written here on their own; with prefix snapshots
// (options.block > 0) the track step rule of request_engine.hpp decides each request's snapshot boundary.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "replayssm/engine_level/event.hpp"
#include "replayssm/engine_level/request_engine.hpp"

namespace replayssm::ref::engine_level {

class RequestTruth {
 public:
  explicit RequestTruth(const EngineLevelSetup& setup);

  struct Request {
    RequestStatus status;
    std::int32_t max_new = 1;
    std::vector<SequenceInputs> history;  // per layer: committed tokens since the last fresh start
    std::vector<std::int32_t> segments;   // tokens of each committed call since the last fresh start
    std::vector<SequenceInputs> pending;  // per layer: prompt tokens still to prefill
    std::vector<std::vector<float>> state;  // per layer: committed state (empty while nothing is committed)
    std::int32_t snapshot = 0;  // block boundary of the latest prefix snapshot (track step rule; 0: none)
  };

  // What the engine under test receives for event e (prompt / window tensors), built from the seeds.
  std::vector<SequenceInputs> prompt_inputs(const Event& e) const;
  // windows[i] of a step (T = 0 inputs for an entry whose request still prefills).
  std::vector<std::vector<SequenceInputs>> step_windows(const Event& e) const;

  // Applies e; for a step returns the true outputs [entry][layer] ([n, HV, V], rounded to the activation
  // dtype). An event that does not fit the request table (unknown or not running request, a resident
  // request too many, T or accepted out of range) is Error("event...") and changes nothing.
  std::vector<std::vector<std::vector<float>>> apply(const Event& e);

  const std::map<std::int32_t, Request>& requests() const { return reqs_; }
  std::map<std::int32_t, RequestStatus> table() const;
  std::int32_t resident() const;
  // The oracle's self-check: the state recomputed from the history alone (zero start, one rounding per
  // committed segment, run_recurrent), to compare bit for bit with the incrementally advanced one.
  // With upto >= 0: the state after the first `upto` committed tokens (the segment holding the cut ends
  // there and is rounded there): a prefix snapshot's truth.
  std::vector<float> recompute(std::int32_t req, std::int32_t layer, std::int32_t upto = -1) const;
  const EngineLevelSetup& setup() const { return s_; }

 private:
  void validate(const Event& e) const;
  EngineLevelSetup s_;
  std::map<std::int32_t, Request> reqs_;
};

}  // namespace replayssm::ref::engine_level
