// EngineSetup: validation, its JSON form (stored in fuzz dumps) and the seeded default setup.
#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "replayssm/error.hpp"
#include "replayssm/recurrence/inputs.hpp"
#include "replayssm/lifecycle/target.hpp"
#include "replayssm/rng.hpp"

namespace replayssm::ref {

void EngineSetup::validate() const {
  cfg.validate();
  require(static_cast<int>(params.size()) == cfg.num_layers, "params", "has ", params.size(),
          " layers, expected num_layers = ", cfg.num_layers);
  for (std::size_t l = 0; l < params.size(); ++l) params[l].validate(cfg, "params[" + std::to_string(l) + "]");
  require(num_slots >= 1, "num_slots", "must be >= 1, got ", num_slots);
  require(slot_stride == 0 || slot_stride >= cfg.state_elems(), "slot_stride", "must be 0 or >= HV*K*V");
  require(max_T >= 1, "max_T", "must be >= 1, got ", max_T);
  require(page_tokens >= 1, "page_tokens", "must be >= 1, got ", page_tokens);
  spec_ring.validate();
  require(pad_convention == PadConvention::MinusOne || num_slots >= 2, "pad_convention",
          "'", to_string(pad_convention), "' reserves a slot and needs num_slots >= 2, got ", num_slots);
  if (conv) conv->validate(cfg, "conv");
}

std::string to_string(PadConvention c) {
  switch (c) {
    case PadConvention::MinusOne: return "minus_one";
    case PadConvention::NullBlock: return "null_block";
    case PadConvention::PadSlot: return "pad_slot";
  }
  return "?";
}

std::vector<PadConvention> all_pad_conventions() {
  return {PadConvention::MinusOne, PadConvention::NullBlock, PadConvention::PadSlot};
}

PadConvention parse_pad_convention(const std::string& s, const std::string& field) {
  for (auto c : all_pad_conventions())
    if (s == to_string(c)) return c;
  fail(field, "unknown PAD convention '", s, "' (minus_one, null_block, pad_slot)");
}

std::int32_t EngineSetup::pad_sentinel() const {
  switch (pad_convention) {
    case PadConvention::NullBlock: return 0;
    case PadConvention::PadSlot: return num_slots - 1;
    default: return kPadSlot;
  }
}

std::vector<TargetRow> canonical_rows(const std::vector<TargetRow>& rows, const EngineSetup& s, bool zero_is_pad) {
  std::vector<TargetRow> out = rows;
  const std::int32_t sentinel = s.pad_sentinel();
  for (auto& t : out) {
    const bool pad = t.graph_tail || t.row.slot == sentinel || (zero_is_pad && t.row.slot == 0);
    if (pad) t.row.slot = t.row.write_slot = kPadSlot;
    t.graph_tail = false;
  }
  return out;
}

// The keys are part of the fuzz dump format (reference/fuzz/campaign.cpp reads them back).
nlohmann::json EngineSetup::to_json() const {
  nlohmann::json j{{"config", replayssm::to_json(cfg)},
                        {"num_slots", num_slots},
                        {"slot_stride", slot_stride},
                        {"max_T", max_T},
                        {"ring_B", spec_ring.B},
                        {"ring_T", spec_ring.T},
                        {"recon", to_string(recon)},
                        {"ring_record_dtype", std::string(dtype_name(record_dtype))},
                        {"page_tokens", page_tokens}};
  if (pad_convention != PadConvention::MinusOne) j["pad_convention"] = to_string(pad_convention);
  if (gates != GateRange::Benign) j["gates"] = to_string(gates);
  if (conv) j["conv"] = conv->to_json();
  if (!step_mix.any()) j["step_mix"] = step_mix.to_json();
  return j;
}

namespace {
template <class T>
T key(const nlohmann::json& j, const char* k, const std::string& field) {
  require(j.is_object() && j.contains(k), field + "." + k, "is missing");
  try {
    return j.at(k).get<T>();
  } catch (const nlohmann::json::exception& e) {
    fail(field + "." + k, "is malformed: ", e.what());
  }
}
}  // namespace

EngineSetup EngineSetup::from_json(const nlohmann::json& j, std::vector<LayerParams> params, float poison,
                                   const std::string& field) {
  require(j.is_object(), field, "must be an object");
  require(j.contains("config"), field + ".config", "is missing");
  EngineSetup s;
  s.cfg = config_from_json(j.at("config"));
  s.num_slots = key<std::int32_t>(j, "num_slots", field);
  s.slot_stride = key<std::int64_t>(j, "slot_stride", field);
  s.max_T = key<std::int32_t>(j, "max_T", field);
  s.spec_ring = SpecRingGeometry{key<std::int32_t>(j, "ring_B", field), key<std::int32_t>(j, "ring_T", field)};
  s.recon = parse_reconstruction(key<std::string>(j, "recon", field), field + ".recon");
  s.record_dtype = parse_dtype(key<std::string>(j, "ring_record_dtype", field), field + ".ring_record_dtype");
  s.page_tokens = key<std::int32_t>(j, "page_tokens", field);
  if (j.contains("pad_convention"))
    s.pad_convention = parse_pad_convention(key<std::string>(j, "pad_convention", field), field + ".pad_convention");
  if (j.contains("gates")) s.gates = parse_gate_range(key<std::string>(j, "gates", field), field + ".gates");
  if (j.contains("conv")) s.conv = ConvSetup::from_json(j.at("conv"), s.cfg, field + ".conv");
  if (j.contains("step_mix")) s.step_mix = StepMix::from_json(j.at("step_mix"), field + ".step_mix");
  s.params = std::move(params);
  s.poison = poison;
  s.validate();
  return s;
}

EngineSetup make_setup(const ModelConfig& cfg, std::uint64_t seed, std::int32_t num_slots, std::int32_t max_T,
                       GateRange gates) {
  EngineSetup s;
  s.cfg = cfg;
  s.gates = gates;
  for (int l = 0; l < cfg.num_layers; ++l) s.params.push_back(random_params(cfg, derive_seed(seed, 100 + l), gates));
  s.num_slots = num_slots;
  s.slot_stride = cfg.state_elems() + 4;  // a gap after every slot that nothing may write (kernels: stride % 4 == 0)
  s.max_T = max_T;
  s.spec_ring = SpecRingGeometry{max_T + 2, max_T};
  s.page_tokens = std::max(1, (max_T + 1) / 2);
  s.poison = std::numeric_limits<float>::quiet_NaN();
  s.validate();
  return s;
}

Tolerance storage_tolerance(double scale) { return Tolerance::allclose(std::ldexp(std::max(1.0, scale), -6), 0.0); }

}  // namespace replayssm::ref
