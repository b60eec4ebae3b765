// replayssm/reference/judge.hpp — the judge: runs every command on the oracle (full_state) and on the
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
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "replayssm/reference/command.hpp"
#include "replayssm/reference/engine.hpp"
#include "replayssm/tier.hpp"

namespace replayssm::ref {

class Judge {
 public:
  // judge_tier: compare outputs and states at this precision tier's tolerance (tier.hpp) whatever the target
  // claims (the teeth test measures each fault against each tier's budget); empty: the target's own claim
  // (bit-exact, or its tolerance()).
  Judge(const EngineSetup& setup, const std::string& target_kind, Fault fault = Fault::None,
        std::optional<Tier> judge_tier = std::nullopt);
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

 private:
  using Outputs = std::vector<std::vector<float>>;
  // Where each request stood before the command (committed tokens, slot): the NaN tripwire's coordinates.
  struct Before {
    std::int32_t position = 0, slot = -1;
  };
  std::string check_outputs(const Outputs& out_o, const Outputs& out_s, const std::map<std::int32_t, Before>& before,
                            const Cmd& c) const;
  std::string check_requests() const;
  std::string check_states() const;
  std::string check_untouched(const Cmd& c, const Outputs& pools_before_o, const Outputs& pools_before_s) const;
  CompareReport compare_values(const std::vector<float>& ref, const std::vector<float>& got, bool state) const;

  Engine oracle_;
  Engine sut_;
  std::optional<Tier> tier_;
  std::vector<Cmd> executed_;
  mutable std::optional<CompareReport> failed_;
  mutable Tolerance failed_tol_;
};

}  // namespace replayssm::ref
