#include "replayssm/recurrence/inputs.hpp"

#include "replayssm/error.hpp"
#include "replayssm/rng.hpp"

namespace replayssm::ref {

namespace {
std::vector<float> normals(Rng& r, std::size_t n, DType t, float mul = 1.0f) {
  std::vector<float> x(n);
  for (auto& e : x) e = round_to(t, mul * r.normalish());
  return x;
}
}  // namespace

std::string to_string(GateRange g) { return g == GateRange::Realistic ? "realistic" : "benign"; }
GateRange parse_gate_range(const std::string& s, const std::string& field) {
  if (s == "benign") return GateRange::Benign;
  if (s == "realistic") return GateRange::Realistic;
  fail(field, "unknown gate range '", s, "' (benign, realistic)");
}

SequenceInputs random_inputs(const ModelConfig& cfg, int T, std::uint64_t seed, GateRange gates) {
  cfg.validate();
  SequenceInputs in;
  in.T = T;
  Rng r(derive_seed(seed, 1));
  in.q = normals(r, static_cast<std::size_t>(T) * cfg.H * cfg.K, cfg.act_dtype);
  in.k = normals(r, static_cast<std::size_t>(T) * cfg.H * cfg.K, cfg.act_dtype);
  in.v = normals(r, static_cast<std::size_t>(T) * cfg.HV * cfg.V, cfg.act_dtype);
  in.a = normals(r, static_cast<std::size_t>(T) * cfg.HV * cfg.a_width(), cfg.act_dtype);
  in.b = normals(r, static_cast<std::size_t>(T) * cfg.HV, cfg.act_dtype);
  if (gates == GateRange::Realistic) {  // a separate stream: q, k, v stay those of the benign mix
    Rng g(derive_seed(seed, 4));
    in.a = normals(g, in.a.size(), cfg.act_dtype, 4.0f);
    for (auto& b : in.b) {
      const auto pick = g.uniform_int(0, 2);  // inclusive
      b = pick == 0 ? 20.0f : pick == 1 ? -20.0f : round_to(cfg.act_dtype, g.normalish());  // +-20: exact in bf16
    }
  }
  return in;
}

LayerParams random_params(const ModelConfig& cfg, std::uint64_t seed, GateRange gates) {
  cfg.validate();
  LayerParams p;
  const bool real = gates == GateRange::Realistic;
  Rng r(derive_seed(seed, 2));
  p.A_log.resize(static_cast<std::size_t>(cfg.HV));
  for (auto& e : p.A_log) e = r.uniform(0.0f, real ? 2.7725887f : 2.5f);  // ln 16 = 2.7725887
  p.dt_bias.resize(static_cast<std::size_t>(cfg.HV) * cfg.a_width());
  for (auto& e : p.dt_bias) e = r.uniform(-5.0f, real ? 2.0f : -1.0f);
  return p;
}

std::vector<float> random_state(const ModelConfig& cfg, std::uint64_t seed) {
  cfg.validate();
  Rng r(derive_seed(seed, 3));
  return normals(r, static_cast<std::size_t>(cfg.state_elems()), cfg.state_dtype, 0.5f);
}

}  // namespace replayssm::ref
