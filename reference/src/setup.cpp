// EngineSetup: validation, its JSON form (stored in fuzz dumps) and the seeded default setup.
#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "replayssm/error.hpp"
#include "replayssm/reference/inputs.hpp"
#include "replayssm/reference/target.hpp"
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
}

// The keys are part of the fuzz dump format (reference/fuzz/campaign.cpp reads them back).
nlohmann::json EngineSetup::to_json() const {
  return nlohmann::json{{"config", replayssm::to_json(cfg)},
                        {"num_slots", num_slots},
                        {"slot_stride", slot_stride},
                        {"max_T", max_T},
                        {"ring_B", spec_ring.B},
                        {"ring_T", spec_ring.T},
                        {"recon", to_string(recon)},
                        {"ring_record_dtype", std::string(dtype_name(record_dtype))},
                        {"page_tokens", page_tokens}};
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
  s.params = std::move(params);
  s.poison = poison;
  s.validate();
  return s;
}

EngineSetup make_setup(const ModelConfig& cfg, std::uint64_t seed, std::int32_t num_slots, std::int32_t max_T) {
  EngineSetup s;
  s.cfg = cfg;
  for (int l = 0; l < cfg.num_layers; ++l) s.params.push_back(random_params(cfg, derive_seed(seed, 100 + l)));
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
