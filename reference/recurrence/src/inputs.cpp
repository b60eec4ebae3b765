#include "replayssm/recurrence/inputs.hpp"

#include <cmath>

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

std::string to_string(GateRange g) {
  switch (g) {
    case GateRange::Realistic: return "realistic";
    case GateRange::Checkpoint: return "checkpoint";
    case GateRange::Benign: break;
  }
  return "benign";
}
GateRange parse_gate_range(const std::string& s, const std::string& field) {
  if (s == "benign") return GateRange::Benign;
  if (s == "realistic") return GateRange::Realistic;
  if (s == "checkpoint") return GateRange::Checkpoint;
  fail(field, "unknown gate range '", s, "' (benign, realistic, checkpoint)");
}

namespace {
// Rescales each row of `width` values (one token's head) to the norm base * m * 10^e, e drawn uniformly from the
// decades [lo, hi) and m from [1, 10), then rounds to the activation dtype: the direction is the unit-variance
// draw's, the size a checkpoint's. Only correctly rounded operations (no pow), so the bits are the same everywhere.
void rescale_rows(std::vector<float>& x, int width, Rng& r, int lo, int hi, double base, DType t) {
  static constexpr double kDecade[] = {1e-3, 1e-2, 1e-1, 1.0, 1e1};  // 10^-3 .. 10^1
  for (std::size_t row = 0; row * width < x.size(); ++row) {
    float* e = &x[row * width];
    double norm = 0.0;
    for (int i = 0; i < width; ++i) norm += static_cast<double>(e[i]) * e[i];
    norm = std::sqrt(norm);
    const int d = r.uniform_int(lo, hi - 1);  // inclusive
    const double target = base * static_cast<double>(r.uniform(1.0f, 10.0f)) * kDecade[d + 3];
    const double mul = norm > 0.0 ? target / norm : 0.0;
    for (int i = 0; i < width; ++i) e[i] = round_to(t, static_cast<float>(mul * e[i]));
  }
}
}  // namespace

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
  if (gates != GateRange::Benign) {  // a separate stream: q, k, v stay those of the benign mix
    Rng g(derive_seed(seed, 4));
    in.a = normals(g, in.a.size(), cfg.act_dtype, 4.0f);
    for (auto& b : in.b) {
      const auto pick = g.uniform_int(0, 2);  // inclusive
      b = pick == 0 ? 20.0f : pick == 1 ? -20.0f : round_to(cfg.act_dtype, g.normalish());  // +-20: exact in bf16
    }
  }
  if (gates == GateRange::Checkpoint) {  // a third stream: the gates stay the realistic ones
    Rng m(derive_seed(seed, 5));
    // q and k rows before normalisation 1e-3 .. 10 (normalised upstream when the kernel does not: at most 1);
    // v rows 1e-3 .. 1 of the unit-variance draw's norm.
    const int qk_hi = cfg.l2norm == L2Norm::None ? 0 : 1;
    rescale_rows(in.q, cfg.K, m, -3, qk_hi, 1.0, cfg.act_dtype);
    rescale_rows(in.k, cfg.K, m, -3, qk_hi, 1.0, cfg.act_dtype);
    rescale_rows(in.v, cfg.V, m, -3, 0, std::sqrt(static_cast<double>(cfg.V)), cfg.act_dtype);
  }
  return in;
}

LayerParams random_params(const ModelConfig& cfg, std::uint64_t seed, GateRange gates) {
  cfg.validate();
  LayerParams p;
  const bool real = gates != GateRange::Benign;
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
