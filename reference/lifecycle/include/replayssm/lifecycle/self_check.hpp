// replayssm/lifecycle/self_check.hpp — differential checks inside one implementation (docs/lifecycle.md, "Self
// checks"; docs/numerics.md, "Self-check bounds"). A self check forks live requests into free slots (copy_slot:
// both paths start from the same bits) and runs the same tokens down two paths of the implementation, then
// compares the two paths' outputs and committed states with each other, not with the oracle:
//   verify_vs_steps — path A: one verify of each row's T tokens, all accepted; path B: T steps of one token each
//                     (token j of every row still that wide in step j), each accepted;
//   repeat          — the same step (rows, tokens, accepted counts, batch order) run twice on two copies;
//   permute         — the same rows in two steps, the second in reversed batch order (two rows or more);
//   chunks          — path A: each row's T tokens as one fresh prefill chunk (from a zero state, as a new prompt,
//                     in its fork slot allocated, not copied: whatever the slot holds must not be read);
//                     path B: the same tokens as a fresh chunk of c tokens and continued chunks of c (the last one
//                     shorter when c does not divide T; the row's `accepted` field carries c, 1 <= c < T).
// Two paths of one implementation agree far more closely than either agrees with a float64 truth: the bound
// counts only the roundings where they may legitimately differ (self_check_bound), or none where the
// implementation claims the check bit-exact (SelfClaim, the protocol's `self_check` capability, 1.8).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "replayssm/config.hpp"
#include "replayssm/recurrence/term_scales.hpp"
#include "replayssm/tier.hpp"

namespace replayssm::ref {

enum class SelfCheckKind : std::uint8_t { VerifyVsSteps, Repeat, Permute, Chunks };
std::string to_string(SelfCheckKind k);  // "verify_vs_steps", "repeat", "permute", "chunks"
SelfCheckKind parse_self_check_kind(const std::string& s, const std::string& field);  // Error(field) listing them
std::vector<SelfCheckKind> all_self_check_kinds();

// What an implementation claims about its own paths (capability `self_check`, protocol 1.8):
//   exact — the checks whose two paths are bit-identical (outputs and committed states, every dtype of the
//           setup): compared bit for bit;
//   tier  — where the two paths may compute differently, the precision they differ at: fp32 (reordered fp32 sums,
//           the default), tf32 (one path's dot products take TF32 operands: a chunked verify beside a recurrent
//           decode) or bf16 (one path stores per-token intermediates or records in bf16). It is not the tier the
//           implementation is judged at against the oracle: a bf16-tier kernel with fp32 paths claims fp32 here.
struct SelfClaim {
  std::set<SelfCheckKind> exact;
  Tier tier = Tier::Fp32;
  bool operator==(const SelfClaim&) const = default;
  bool is_default() const { return exact.empty() && tier == Tier::Fp32; }
  nlohmann::json to_json() const;  // {"exact": [names], "tier": "fp32"}
  // Strict: an object with only the keys exact (an array of distinct check names) and tier (a tier name), both
  // optional; Error("<field>.<key>") otherwise.
  static SelfClaim from_json(const nlohmann::json& j, const std::string& field);
  std::string str() const;  // "exact: repeat, permute; tier fp32"
};

// How often path B stores the state where path A does not: after every `every` tokens (verify_vs_steps 1, chunks
// the chunk length c), or never (0: repeat and permute store at the same points on both paths).
int extra_stores_every(SelfCheckKind kind, int chunk);

// The elementwise bound of one self check's comparison (docs/numerics.md, "Self-check bounds"), per element of
// the compared tensor: an output [T, HV, V] (state = false) or a committed state [HV, ...] (state = true) of one
// row in one layer, both paths' values a and b given (an output's bound allows for one rounding of the
// activation dtype apart, taken at the larger magnitude). ts holds the row's term scales over its window from the
// forks' common start (term_scales.hpp); n is the count the state was committed with; every is
// extra_stores_every. Each element's bound is
//   2 c * scale                                   both paths within c * scale of the exact value (c = 2e-5 for
//                                                 fp32, 16 u for tf32 and bf16: the tiers' worst-element
//                                                 constants, docs/numerics.md "Precision tiers")
//   + r * 2^-8 * sqrt(K) * state scale (* |q|_1)  BF16 state only: r stores of the state one path makes and the
//                                                 other does not (path B stores after every `every` tokens: an
//                                                 output of token t reads floor(t / every) of them, a committed
//                                                 state is ceil(n / every) + 1 roundings apart), each at most
//                                                 2^-8 |S| per element, carried by the update's contraction with at
//                                                 most its column's 2-norm
//   + ulp(max(|a|, |b|))                          one rounding of the stored dtype apart (activation dtype for an
//                                                 output, state dtype for a state).
std::vector<double> self_check_bound(const ModelConfig& cfg, int every, const SelfClaim& claim, const TermScales& ts,
                                     int n, bool state, const std::vector<float>& a, const std::vector<float>& b);

}  // namespace replayssm::ref
