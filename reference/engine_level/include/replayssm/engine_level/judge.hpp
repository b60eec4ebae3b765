// replayssm/engine_level/judge.hpp — the engine-level judge: every event on the per-request truth
// (truth.hpp) and on the engine under test (request_engine.hpp), then, after every event:
//   1. outputs: every step entry's outputs equal the truth's (bit-exact, or the engine's tolerance);
//   2. request tables: status, committed token count, tokens left to prefill and generated count agree;
//   3. states: every running request with committed tokens has the truth's committed state in every layer
//      (a deferred commit included), and the truth equals its own recomputation from the history;
//   4. slot map: exactly the running requests are mapped, to slots in [0, num_slots); two requests share a
//      slot only while their true states are bitwise equal (copy-on-write);
//   5. untouched slots: a slot mapped to no running request before the event and after it is bitwise
//      unchanged, in every layer; the gap after every slot always is. The write set of an event is thus the
//      slots of the requests running before or after it: a deferred commit resolved by the event writes the
//      slots of a request it belongs to, and a commit landing in a slot nobody holds is a failure;
//   6. prefix snapshots (options.block > 0): every running request's snapshot boundary is the truth's (track
//      step rule, request_engine.hpp) and its state, in every layer, is the truth's history recomputed up to
//      exactly that boundary (the slots of a snapshot are in its request's slot map).
// A migrate event goes only to engines that migrate (to the others it is nothing at all).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "replayssm/compare.hpp"
#include "replayssm/engine_level/truth.hpp"

namespace replayssm::ref::engine_level {

class EngineJudge {
 public:
  EngineJudge(const EngineLevelSetup& setup, std::unique_ptr<RequestEngine> sut);
  // Several engines judged in lock step against one truth, each set up with its own options (e.g. every
  // commit mode and buffering: they must all give the same observable results); setup.options.max_live is
  // the bound for all of them.
  struct Candidate {
    EngineOptions options;
    std::unique_ptr<RequestEngine> engine;
  };
  EngineJudge(const EngineLevelSetup& setup, std::vector<Candidate> suts);
  // "" when every check passes on every engine, else the first disagreement (which engine's options, check,
  // request, layer, worst element). An Error from the truth means the event itself is invalid and propagates.
  std::string apply(const Event& e);
  const RequestTruth& truth() const { return truth_; }
  std::size_t engines() const { return suts_.size(); }
  const RequestEngine& sut(std::size_t i = 0) const { return *suts_.at(i).engine; }
  // "same_iteration/in_place" etc.: how engine i was set up.
  std::string label(std::size_t i) const;
  const std::vector<Event>& executed() const { return executed_; }

 private:
  using Pools = std::vector<std::vector<float>>;
  using Outputs = std::vector<std::vector<std::vector<float>>>;
  using SlotMap = std::map<std::int32_t, std::vector<std::int32_t>>;
  static void run_on(RequestEngine& sut, const RequestTruth& truth, const Event& e,
                     const std::vector<std::vector<SequenceInputs>>& windows, Outputs& out);
  std::string check_outputs(const RequestEngine& sut, const Event& e, const Outputs& want, const Outputs& got) const;
  std::string check_table(const RequestEngine& sut) const;
  std::string check_states(const RequestEngine& sut) const;
  std::string check_snapshots(const RequestEngine& sut) const;
  std::string check_slots(const RequestEngine& sut, const SlotMap& before, const Pools& pools_before) const;
  CompareReport compare_values(const RequestEngine& sut, const std::vector<float>& ref, const std::vector<float>& got,
                               bool state) const;

  RequestTruth truth_;
  std::vector<Candidate> suts_;
  std::vector<Event> executed_;
};

}  // namespace replayssm::ref::engine_level
