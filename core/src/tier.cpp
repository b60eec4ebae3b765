#include "replayssm/tier.hpp"

#include <algorithm>
#include <cmath>

#include "replayssm/error.hpp"

namespace replayssm {

std::vector<Tier> all_tiers() { return {Tier::Fp32, Tier::Tf32, Tier::Bf16}; }

std::string to_string(Tier t) {
  switch (t) {
    case Tier::Fp32: return "fp32";
    case Tier::Tf32: return "tf32";
    case Tier::Bf16: return "bf16";
  }
  return "fp32";
}

Tier parse_tier(const std::string& s, const std::string& field) {
  for (Tier t : all_tiers())
    if (s == to_string(t)) return t;
  fail(field, "unknown precision tier '", s, "' (known: fp32, tf32, bf16)");
}

double unit_roundoff(Tier t) {
  switch (t) {
    case Tier::Fp32: return std::ldexp(1.0, -24);
    case Tier::Tf32: return std::ldexp(1.0, -11);
    case Tier::Bf16: return std::ldexp(1.0, -9);
  }
  return std::ldexp(1.0, -24);
}

Tolerance tier_tolerance(Tier t, const ModelConfig& cfg, double scale, bool state) {
  const double m = std::max(1.0, scale);
  // A bf16-stored value can round one ulp apart on the two sides and carry it forward (docs/numerics.md).
  const bool bf16_storage =
      cfg.state_dtype == DType::BF16 || (!state && cfg.act_dtype == DType::BF16) || cfg.round_beta_to_act;
  const double storage_atol = bf16_storage ? std::ldexp(m, -6) : 0.0;
  if (t == Tier::Fp32) return Tolerance::allclose(std::max(2e-5 * m, storage_atol), 0.0);
  const double u = unit_roundoff(t);
  // A bf16-stored element can also differ by one ulp (2^-7 relative at most) where the two sides' values
  // straddle a rounding boundary: added to the statistical part as the worst case of every element flipping.
  const double storage_rms = bf16_storage ? std::ldexp(1.0, -7) : 0.0;
  return Tolerance::budget(8.0 * u + storage_rms, std::max(16.0 * u * m, storage_atol));
}

Tolerance tier_tolerance(Tier t, const ModelConfig& cfg, std::vector<double> term_scale, bool state) {
  // The unscaled form at scale 1 has exactly the constants, then every atol is read relative to the term scale.
  return tier_tolerance(t, cfg, 1.0, state).scaled(std::move(term_scale));
}

Tolerance storage_tolerance_scaled(std::vector<double> term_scale) {
  return Tolerance::allclose(std::ldexp(1.0, -6), 0.0).scaled(std::move(term_scale));
}

}  // namespace replayssm
