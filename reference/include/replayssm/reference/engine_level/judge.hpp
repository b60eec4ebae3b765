// replayssm/reference/engine_level/judge.hpp — the engine-level judge: every event on the per-request truth
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
//      slots of a request it belongs to, and a commit landing in a slot nobody holds is a failure.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "replayssm/compare.hpp"
#include "replayssm/reference/engine_level/truth.hpp"

namespace replayssm::ref::engine_level {

class EngineJudge {
 public:
  EngineJudge(const EngineLevelSetup& setup, std::unique_ptr<RequestEngine> sut);
  // "" when every check passes, else the first disagreement (check, request, layer, worst element). An Error
  // from the truth means the event itself is invalid and propagates.
  std::string apply(const Event& e);
  const RequestTruth& truth() const { return truth_; }
  const RequestEngine& sut() const { return *sut_; }
  const std::vector<Event>& executed() const { return executed_; }

 private:
  using Pools = std::vector<std::vector<float>>;
  void run_on_sut(const Event& e, const std::vector<std::vector<SequenceInputs>>& windows,
                  std::vector<std::vector<std::vector<float>>>& out);
  std::string check_outputs(const Event& e, const std::vector<std::vector<std::vector<float>>>& want,
                            const std::vector<std::vector<std::vector<float>>>& got) const;
  std::string check_table() const;
  std::string check_states() const;
  std::string check_slots(const std::map<std::int32_t, std::vector<std::int32_t>>& before, const Pools& pools_before,
                          std::map<std::int32_t, std::vector<std::int32_t>>& after) const;
  CompareReport compare_values(const std::vector<float>& ref, const std::vector<float>& got, bool state) const;

  RequestTruth truth_;
  std::unique_ptr<RequestEngine> sut_;
  std::vector<Event> executed_;
};

}  // namespace replayssm::ref::engine_level
