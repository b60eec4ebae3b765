// StepMix (target.hpp): its JSON form (the protocol's `step_mix` capability and setup key) and the check of a
// batch as a target receives it against a mix.
#include <nlohmann/json.hpp>

#include "replayssm/error.hpp"
#include "replayssm/lifecycle/target.hpp"

namespace replayssm::ref {

nlohmann::json StepMix::to_json() const { return {{"one_width", one_width}, {"prefill_apart", prefill_apart}}; }

StepMix StepMix::from_json(const nlohmann::json& j, const std::string& field) {
  require(j.is_object(), field, "must be an object with one_width and prefill_apart (true or false)");
  StepMix m;
  for (const auto& [k, v] : j.items()) {
    require(k == "one_width" || k == "prefill_apart", field + "." + k, "is not a step_mix key (one_width, prefill_apart)");
    require(v.is_boolean(), field + "." + k, "must be true or false");
    (k == "one_width" ? m.one_width : m.prefill_apart) = v.get<bool>();
  }
  return m;
}

std::string StepMix::str() const {
  if (any()) return "any";
  if (one_width && prefill_apart) return "one_width+prefill_apart";
  return one_width ? "one_width" : "prefill_apart";
}

StepMix parse_step_mix(const std::string& s, const std::string& field) {
  for (const StepMix m : {StepMix{}, StepMix{true, false}, StepMix{false, true}, StepMix{true, true}})
    if (s == m.str() || (s == "both" && m.one_width && m.prefill_apart)) return m;
  fail(field, "unknown step mix '", s, "' (any, one_width, prefill_apart, both)");
}

std::string step_mix_excess(const std::vector<TargetRow>& rows, const EngineSetup& s, const StepMix& mix) {
  if (mix.any() || rows.empty()) return {};
  const auto canon = canonical_rows(rows, s);
  long prefill = 0, verify = 0, pad = 0;
  for (std::size_t i = 0; i < canon.size(); ++i) {
    const auto& t = canon[i];
    if (mix.one_width && t.row.T != canon.front().row.T)
      return "row " + std::to_string(i) + " is " + std::to_string(t.row.T) + " tokens wide and row 0 " +
             std::to_string(canon.front().row.T) + " (one width per step)";
    if (t.row.slot == kPadSlot) ++pad;
    else ++(t.kind == RowKind::Prefill ? prefill : verify);
  }
  if (mix.prefill_apart && prefill > 0 && verify > 0)
    return std::to_string(prefill) + " prefill chunk(s) beside " + std::to_string(verify) +
           " verify row(s) (prefill apart)";
  if (mix.prefill_apart && prefill > 0 && pad > 0)
    return std::to_string(pad) + " PAD or graph tail row(s) pad a prefill step (prefill apart)";
  return {};
}

}  // namespace replayssm::ref
