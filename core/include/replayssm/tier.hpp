// replayssm/tier.hpp — precision tiers: the named tolerance vocabulary an implementation claims (in its
// protocol handshake, or as an argument of the fixture check). The error budget of each tier is derived in
// docs/numerics.md ("Precision tiers") from the operation order and counts, never fitted to a result:
//   fp32 — IEEE fp32 arithmetic and fp32 storage of every intermediate (the reference's own precision);
//   tf32 — dot products with TF32 operands (10 explicit mantissa bits, as tensor cores and Triton's default
//          tl.dot use), fp32 accumulation, fp32 state;
//   bf16 — bf16 storage of per-token intermediates or records (chunk intermediates, ring records u and k),
//          fp32 arithmetic and fp32 state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "replayssm/compare.hpp"
#include "replayssm/config.hpp"

namespace replayssm {

enum class Tier : std::uint8_t { Fp32, Tf32, Bf16 };

// Version of the tier vocabulary: the names below and the formulas of tier_tolerance. It changes whenever a
// name is added or removed or a formula changes, so a file that records judging at a tier (trace fixtures)
// can say which vocabulary it means and a reader can refuse one it does not know.
inline constexpr const char* kTierVocabularyVersion = "1";

std::string to_string(Tier t);                                          // "fp32", "tf32", "bf16"
Tier parse_tier(const std::string& s, const std::string& field = "tier");  // Error(field) listing the names
std::vector<Tier> all_tiers();

// Unit roundoff of the tier's arithmetic: fp32 2^-24, tf32 2^-11 (10 explicit mantissa bits), bf16 2^-9 — half of
// bf16's true unit roundoff 2^-8 (7 explicit bits): tier vocabulary 1 set the bf16 constants with it, the stricter
// reading (docs/numerics.md, "The bf16 tier's u").
double unit_roundoff(Tier t);

// The comparison of an implementation claiming tier `t` against the fp32 oracle, for one compared tensor
// of largest reference magnitude `scale`: an output (state = false) or a committed state (state = true) of
// a model cfg. docs/numerics.md ("Precision tiers") derives every constant:
//   fp32 — allclose(atol = 2e-5 * max(1, scale)): reordered fp32 sums and fused multiply-adds, worst case;
//   tf32, bf16 — budget(rel_rms = 8 u, atol = 16 u * max(1, scale)) with u = unit_roundoff(t): statistical
//          (about 1.2 u of relative RMS per output from two dot products with rounded operands, state errors
//          no larger and damped by the decay; 8 u is 6.7 standard deviations) with a worst-element bound;
// and, where the compared tensor (or, for an output, the state it reads) is stored in bf16, room for one
// bf16 rounding apart: atol at least 2^-6 * max(1, scale) (as target.hpp's storage_tolerance) and 2^-7 more
// relative RMS (the worst case of every element rounding the other way).
Tolerance tier_tolerance(Tier t, const ModelConfig& cfg, double scale, bool state);
// The same bounds relative to each element's term scale (docs/numerics.md, "Term scales"): the magnitude of the
// terms that produce it — for an output the absolute terms of its dot product, for a state its own terms over its
// history — instead of max(1, max|ref|): no floor of 1, a small tensor judged at its own size. The worst-element
// bound becomes c * scale[i] (c = 2e-5 for fp32, 16 u otherwise, at least 2^-6 where bf16 storage applies), the
// budget's RMS ratio relative to RMS(scale).
Tolerance tier_tolerance(Tier t, const ModelConfig& cfg, std::vector<double> term_scale, bool state);
// storage_tolerance's bound (2^-6 relative, several bf16 roundings apart) per term scale.
Tolerance storage_tolerance_scaled(std::vector<double> term_scale);

}  // namespace replayssm
