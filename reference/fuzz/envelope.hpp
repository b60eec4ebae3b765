// What a target claims, as the campaigns draw it (docs/lifecycle.md, "The claimed envelope"): every value of
// every configuration dimension the target covers on a base configuration (the preset's dimensions), probed
// through Target::unsupported one dimension at a time, and its lifecycle capabilities. A campaign draws each
// case's configuration from the envelope (draw_config), so a run exercises everything claimed, not one fixed
// configuration; CLI flags narrow a dimension to one value (narrow).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "replayssm/config.hpp"
#include "replayssm/lifecycle/target.hpp"

namespace replayssm::fuzz {

struct Envelope {
  std::vector<DType> act_dtypes, state_dtypes;
  std::vector<StateLayout> layouts;
  std::vector<L2Norm> l2norms;       // the normalising forms only (l2norm none is a fixture mode, not a model)
  std::vector<KdaGate> kda_gates;    // KDA bases only; empty for GDN
  std::vector<bool> round_beta;      // values of round_beta_to_act
  int max_T = 0;                     // the widest window covered (0: the base configuration is not covered)
  std::vector<ref::PadConvention> pad_conventions;
  bool copy = false, graph_padding = false, out_of_place = false, capture = false, conv = false;
  bool graph_replay = false;         // replays of captured buckets (Target::graph_replay, protocol 1.9)
  ref::StepMix step_mix;             // what one step may mix (Target::step_mix)
  bool covered() const { return max_T > 0; }
  nlohmann::json to_json() const;
  // Reads to_json's form (a report being merged); Error("<field>.<key>") for a malformed one.
  static Envelope from_json(const nlohmann::json& j, const std::string& field = "envelope");
};

// Probes `t` on `base`: each dimension's values for which t.unsupported(base with that value, 1) is "", the
// largest max_T in [1, max_T_cap] that is covered, and the capabilities. A base the target does not cover gives
// an envelope with max_T = 0.
Envelope probe_envelope(const ref::Target& t, const ModelConfig& base, int max_T_cap);

// The smallest heads and dims of `tiny` (a small preset of one op) the target covers (in some claimed_variant):
// tiny itself, else K = V in 16, 32, 64, 128, 256 with tiny's heads, then with HV = H; nullopt when none is
// covered. Full-depth campaigns run
// there (docs/lifecycle.md, "Verdict levels").
std::optional<ModelConfig> smallest_claimed(const ref::Target& t, const ModelConfig& tiny);

// The envelope with the dimensions a CLI flag fixed narrowed to that value (nullopt: not fixed); a fixed value
// outside the envelope leaves the dimension empty (the campaign is then not covered). max_T_cap bounds max_T.
struct Narrowing {
  std::optional<DType> act_dtype, state_dtype;
  std::optional<StateLayout> layout;
  std::optional<L2Norm> l2norm;
  std::optional<KdaGate> kda_gate;
  std::optional<bool> round_beta;
};
Envelope narrow(Envelope e, const Narrowing& n);

// The first configuration the target covers (T = 1) among base's dimensions and model with the values of
// act_dtype, state_dtype, layout, l2norm (normalising forms), kda_gate (KDA) and round_beta_to_act varied,
// base's own values first and the ones `n` fixes kept: a target claiming only BF16 states is probed and fuzzed
// at BF16 states instead of being refused at the preset's F32. nullopt when no combination is covered.
std::optional<ModelConfig> claimed_variant(const ref::Target& t, const ModelConfig& base, const Narrowing& n = {});

// One case's configuration: base with every dimension drawn uniformly from the envelope by `seed` (a
// combination the target refuses is drawn again, up to 16 times, then base's own values where covered). The
// case's widest window: the envelope's max_T for half the cases, else uniform in [1, max_T].
struct CaseConfig {
  ModelConfig cfg;
  int max_T = 1;
};
CaseConfig draw_config(const Envelope& e, const ModelConfig& base, const ref::Target& t, std::uint64_t seed);

}  // namespace replayssm::fuzz
