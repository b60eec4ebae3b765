// The term scales of a window (term_scales.hpp).
#include "replayssm/recurrence/term_scales.hpp"

#include <algorithm>
#include <cmath>

#include "replayssm/error.hpp"

namespace replayssm::ref {

TermScales term_scales(const ModelConfig& cfg, const LayerParams& p, const std::vector<float>& S0,
                       const SequenceInputs& in) {
  const std::int64_t E = cfg.state_elems();
  require(S0.empty() || static_cast<std::int64_t>(S0.size()) == E, "S0", "has ", S0.size(), " values, expected ", E);
  const int K = cfg.K, V = cfg.V, HV = cfg.HV;
  std::vector<double> S(static_cast<std::size_t>(E), 0.0), prev, o(static_cast<std::size_t>(HV) * V);
  for (std::size_t i = 0; i < S0.size(); ++i) S[i] = S0[i];
  TermScales ts;
  ts.T = in.T;
  ts.HV = HV;
  ts.out.assign(static_cast<std::size_t>(in.T) * HV, 0.0);
  ts.state.assign(static_cast<std::size_t>(in.T) * HV, 0.0);
  ts.q_l1.assign(static_cast<std::size_t>(in.T) * HV, 0.0);
  std::vector<double> qs(static_cast<std::size_t>(K)), g(static_cast<std::size_t>(cfg.a_width()));
  const double scale = cfg.scale();
  for (int t = 0; t < in.T; ++t) {
    prev = S;
    token_step<double>(cfg, p, in, t, S.data(), o.data());
    for (int hv = 0; hv < HV; ++hv) {
      const int h = cfg.key_head(hv);
      l2normalize<double>(cfg, &in.q[(static_cast<std::size_t>(t) * cfg.H + h) * K], K, scale, qs.data());
      log_decay<double>(cfg, p, in, t, hv, g.data());
      const double* Sh = S.data() + static_cast<std::size_t>(hv) * K * V;
      const double* Ph = prev.data() + static_cast<std::size_t>(hv) * K * V;
      double out_max = 0.0, state_max = 0.0;
      for (int v = 0; v < V; ++v) {
        double terms = 0.0;
        for (int k = 0; k < K; ++k) {
          const std::int64_t i = state_index(cfg, k, v);
          const double alpha = std::exp(g[cfg.op == Op::GDN ? 0 : k]);
          const double decayed = alpha * Ph[i];
          terms += std::fabs(Sh[i]) * std::fabs(qs[static_cast<std::size_t>(k)]);
          state_max = std::max({state_max, std::fabs(decayed), std::fabs(Sh[i] - decayed), std::fabs(Sh[i])});
        }
        out_max = std::max(out_max, terms);
      }
      ts.out[static_cast<std::size_t>(t) * HV + hv] = out_max;
      double l1 = 0.0;
      for (double x : qs) l1 += std::fabs(x);
      ts.q_l1[static_cast<std::size_t>(t) * HV + hv] = l1;
      ts.state[static_cast<std::size_t>(t) * HV + hv] = state_max;
    }
  }
  return ts;
}

std::vector<double> running_state_scales(const TermScales& s, std::vector<double> from, int n) {
  for (int t = 0; t < n && t < s.T; ++t)
    for (int hv = 0; hv < s.HV; ++hv)
      from[static_cast<std::size_t>(hv)] = std::max(from[static_cast<std::size_t>(hv)], s.state[static_cast<std::size_t>(t) * s.HV + hv]);
  return from;
}

void add_state_error(TermScales& s, std::vector<double> from) {
  for (int t = 0; t < s.T; ++t)
    for (int hv = 0; hv < s.HV; ++hv) {
      const std::size_t i = static_cast<std::size_t>(t) * s.HV + hv;
      from[static_cast<std::size_t>(hv)] = std::max(from[static_cast<std::size_t>(hv)], s.state[i]);
      s.out[i] += s.q_l1[i] * from[static_cast<std::size_t>(hv)];
    }
}

std::vector<double> state_magnitude(const ModelConfig& cfg, const std::vector<float>& S) {
  std::vector<double> m(static_cast<std::size_t>(cfg.HV), 0.0);
  const std::size_t per = static_cast<std::size_t>(cfg.K) * cfg.V;
  for (std::size_t i = 0; i < S.size() && i / per < m.size(); ++i)
    if (std::isfinite(S[i])) m[i / per] = std::max(m[i / per], static_cast<double>(std::fabs(S[i])));
  return m;
}

std::vector<double> output_element_scales(const ModelConfig& cfg, const TermScales& s) {
  std::vector<double> e(static_cast<std::size_t>(s.T) * s.HV * cfg.V);
  for (std::size_t th = 0; th < s.out.size(); ++th)
    std::fill(e.begin() + static_cast<std::ptrdiff_t>(th * cfg.V), e.begin() + static_cast<std::ptrdiff_t>((th + 1) * cfg.V),
              s.out[th]);
  return e;
}

std::vector<double> state_element_scales(const ModelConfig& cfg, const std::vector<double>& per_head) {
  const std::size_t per = static_cast<std::size_t>(cfg.K) * cfg.V;
  std::vector<double> e(per_head.size() * per);
  for (std::size_t hv = 0; hv < per_head.size(); ++hv)
    std::fill(e.begin() + static_cast<std::ptrdiff_t>(hv * per), e.begin() + static_cast<std::ptrdiff_t>((hv + 1) * per),
              per_head[hv]);
  return e;
}

}  // namespace replayssm::ref
