#include "replayssm/recurrence/gdn.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>

#include "replayssm/dtype.hpp"
#include "replayssm/error.hpp"

namespace replayssm::ref {

namespace {
std::size_t n_expect(int T, int a, int b) { return static_cast<std::size_t>(T) * a * b; }
void check_len(const std::vector<float>& x, std::size_t want, const std::string& field, const char* shape) {
  require(x.size() == want, field, "has ", x.size(), " elements, expected ", want, " (", shape, ")");
}
template <class R>
R round_through(DType t, R x) {
  return static_cast<R>(round_to(t, static_cast<float>(x)));
}
}  // namespace

void SequenceInputs::validate(const ModelConfig& cfg, const std::string& prefix) const {
  require(T >= 0, prefix + ".T", "must be >= 0, got ", T);
  check_len(q, n_expect(T, cfg.H, cfg.K), prefix + ".q", "[T, H, K]");
  check_len(k, n_expect(T, cfg.H, cfg.K), prefix + ".k", "[T, H, K]");
  check_len(v, n_expect(T, cfg.HV, cfg.V), prefix + ".v", "[T, HV, V]");
  check_len(a, n_expect(T, cfg.HV, cfg.a_width()), prefix + ".a", cfg.op == Op::GDN ? "[T, HV]" : "[T, HV, K]");
  check_len(b, n_expect(T, cfg.HV, 1), prefix + ".b", "[T, HV]");
}

SequenceInputs SequenceInputs::slice(const ModelConfig& cfg, int t0, int n) const {
  require(t0 >= 0 && n >= 0 && t0 + n <= T, "slice", "tokens [", t0, ", ", t0 + n, ") outside [0, ", T, ")");
  auto cut = [&](const std::vector<float>& x, int per) {
    return std::vector<float>(x.begin() + static_cast<std::ptrdiff_t>(t0) * per,
                              x.begin() + static_cast<std::ptrdiff_t>(t0 + n) * per);
  };
  SequenceInputs s;
  s.T = n;
  s.q = cut(q, cfg.H * cfg.K);
  s.k = cut(k, cfg.H * cfg.K);
  s.v = cut(v, cfg.HV * cfg.V);
  s.a = cut(a, cfg.HV * cfg.a_width());
  s.b = cut(b, cfg.HV);
  return s;
}

SequenceInputs SequenceInputs::concat(const ModelConfig& cfg, const SequenceInputs& x, const SequenceInputs& y) {
  x.validate(cfg, "concat.first");
  y.validate(cfg, "concat.second");
  SequenceInputs s = x;
  s.T = x.T + y.T;
  s.q.insert(s.q.end(), y.q.begin(), y.q.end());
  s.k.insert(s.k.end(), y.k.begin(), y.k.end());
  s.v.insert(s.v.end(), y.v.begin(), y.v.end());
  s.a.insert(s.a.end(), y.a.begin(), y.a.end());
  s.b.insert(s.b.end(), y.b.begin(), y.b.end());
  return s;
}

void LayerParams::validate(const ModelConfig& cfg, const std::string& prefix) const {
  check_len(A_log, static_cast<std::size_t>(cfg.HV), prefix + ".A_log", "[HV]");
  check_len(dt_bias, static_cast<std::size_t>(cfg.HV) * cfg.a_width(), prefix + ".dt_bias",
            cfg.op == Op::GDN ? "[HV]" : "[HV * K]");
}

template <class R>
R softplus(R x) {
  return x > R(20) ? x : std::log1p(std::exp(x));
}
template <class R>
R sigmoid(R x) {
  return R(1) / (R(1) + std::exp(-x));
}

template <class R>
void log_decay(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in, int t, int hv, R* g_out) {
  const R A = static_cast<R>(p.A_log[hv]);
  if (cfg.op == Op::GDN) {
    const R x = static_cast<R>(in.a[static_cast<std::size_t>(t) * cfg.HV + hv]) + static_cast<R>(p.dt_bias[hv]);
    g_out[0] = -std::exp(A) * softplus(x);
    return;
  }
  const float* a = &in.a[(static_cast<std::size_t>(t) * cfg.HV + hv) * cfg.K];
  const float* bias = &p.dt_bias[static_cast<std::size_t>(hv) * cfg.K];
  const R eA = std::exp(A);
  for (int c = 0; c < cfg.K; ++c) {
    const R x = static_cast<R>(a[c]) + static_cast<R>(bias[c]);
    g_out[c] = cfg.kda_gate == KdaGate::Softplus ? -eA * softplus(x)
                                                 : static_cast<R>(cfg.lower_bound) * sigmoid(eA * x);
  }
}

template <class R>
R beta_of(const ModelConfig& cfg, const SequenceInputs& in, int t, int hv) {
  const R beta = sigmoid(static_cast<R>(in.b[static_cast<std::size_t>(t) * cfg.HV + hv]));
  return cfg.round_beta_to_act ? round_through(cfg.act_dtype, beta) : beta;
}

template <class R>
void l2normalize(const ModelConfig& cfg, const float* x, int n, R mul, R* out) {
  if (cfg.l2norm == L2Norm::None) {
    for (int i = 0; i < n; ++i) out[i] = static_cast<R>(x[i]) * mul;
    return;
  }
  R s = 0;
  for (int i = 0; i < n; ++i) s += static_cast<R>(x[i]) * static_cast<R>(x[i]);
  const R eps = static_cast<R>(cfg.l2_eps);
  if (cfg.l2norm == L2Norm::DivNormPlusEps || cfg.l2norm == L2Norm::DivMaxNormEps) {
    const R norm = std::sqrt(s);
    const R d = cfg.l2norm == L2Norm::DivNormPlusEps ? norm + eps : std::max(norm, eps);
    for (int i = 0; i < n; ++i) out[i] = static_cast<R>(x[i]) / d * mul;
    return;
  }
  const R den = std::sqrt(s + eps);
  if (cfg.l2norm == L2Norm::RsqrtMul) {
    const R inv = R(1) / den;
    for (int i = 0; i < n; ++i) out[i] = static_cast<R>(x[i]) * inv * mul;
  } else {
    for (int i = 0; i < n; ++i) out[i] = static_cast<R>(x[i]) / den * mul;
  }
}

namespace {
// Steps 3-7 of one value head: decay, read, delta, write, output (u receives the delta when non-null).
// HOOKED passes the dot products' operands through the hook; the other instance is the plain definition.
template <class R, bool HOOKED>
void head_update(const ModelConfig& cfg, R* S, const R* kh, const R* qh, const R* alpha, R beta, const float* vv, R* u,
                 R* o_h, const TokenHook* hook) {
  const auto op = [hook](R x) {
    if constexpr (HOOKED) return static_cast<R>(hook->dot_operand(static_cast<double>(x)));
    else {
      (void)hook;  // captured for the hooked instance only
      return x;
    }
  };
  const int K = cfg.K, V = cfg.V;
  bool before = false;
  if constexpr (HOOKED) before = hook->output_before_update();
  for (int j = 0; j < V; ++j) {
    R kv = 0, o_before = 0;
    for (int c = 0; c < K; ++c) {
      R& s = S[state_index(cfg, c, j)];
      s = alpha[c] * s;
      kv += op(s) * op(kh[c]);
      if (before) o_before += op(s) * op(qh[c]);
    }
    const R d = beta * (static_cast<R>(vv[j]) - kv);
    if (u) u[j] = d;
    R o = 0;
    for (int c = 0; c < K; ++c) {
      R& s = S[state_index(cfg, c, j)];
      s = s + kh[c] * d;
      o += op(s) * op(qh[c]);
    }
    o_h[j] = before ? o_before : o;
  }
}
}  // namespace

template <class R>
void token_step(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in, int t, R* state, R* o_t,
                TokenRecord<R>* rec, const TokenHook* hook) {
  const int K = cfg.K, V = cfg.V;
  const R scale = static_cast<R>(cfg.scale());
  std::vector<R> kn(static_cast<std::size_t>(cfg.H) * K), qs(static_cast<std::size_t>(cfg.H) * K);
  // A hook may normalise with another form than the configuration's (a fault of the catalogue).
  ModelConfig other;
  const ModelConfig* ncfg = &cfg;
  if (hook && hook->l2norm(cfg.l2norm) != cfg.l2norm) {
    other = cfg;
    other.l2norm = hook->l2norm(cfg.l2norm);
    ncfg = &other;
  }
  for (int h = 0; h < cfg.H; ++h) {
    const std::size_t off = (static_cast<std::size_t>(t) * cfg.H + h) * K;
    l2normalize<R>(*ncfg, &in.k[off], K, R(1), &kn[static_cast<std::size_t>(h) * K]);
    l2normalize<R>(*ncfg, &in.q[off], K, scale, &qs[static_cast<std::size_t>(h) * K]);
  }
  std::vector<R> g(static_cast<std::size_t>(cfg.a_width())), alpha(static_cast<std::size_t>(K));
  if (rec) {
    rec->k = kn;
    rec->u.assign(static_cast<std::size_t>(cfg.HV) * V, R(0));
    rec->g.assign(static_cast<std::size_t>(cfg.HV) * cfg.a_width(), R(0));
  }
  for (int hv = 0; hv < cfg.HV; ++hv) {
    const int h = hook ? hook->key_head(cfg, hv) : cfg.key_head(hv);
    const R* kh = &kn[static_cast<std::size_t>(h) * K];
    const R* qh = &qs[static_cast<std::size_t>(h) * K];
    log_decay<R>(cfg, p, in, t, hv, g.data());
    for (int c = 0; c < K; ++c) alpha[c] = std::exp(g[cfg.op == Op::GDN ? 0 : c]);
    if (hook)
      for (int c = 0; c < K; ++c) alpha[c] = static_cast<R>(hook->alpha(static_cast<double>(alpha[c])));
    if (rec) std::copy(g.begin(), g.end(), rec->g.begin() + static_cast<std::ptrdiff_t>(hv) * cfg.a_width());
    R beta = beta_of<R>(cfg, in, t, hv);
    if (hook) beta = static_cast<R>(hook->beta(static_cast<double>(beta)));
    const float* vv = &in.v[(static_cast<std::size_t>(t) * cfg.HV + hv) * V];
    R* S = state + static_cast<std::size_t>(hv) * K * V;
    if (hook)
      head_update<R, true>(cfg, S, kh, qh, alpha.data(), beta, vv, rec ? &rec->u[static_cast<std::size_t>(hv) * V] : nullptr,
                           &o_t[static_cast<std::size_t>(hv) * V], hook);
    else
      head_update<R, false>(cfg, S, kh, qh, alpha.data(), beta, vv,
                            rec ? &rec->u[static_cast<std::size_t>(hv) * V] : nullptr, &o_t[static_cast<std::size_t>(hv) * V],
                            nullptr);
  }
}

template <class R>
void round_to_state_dtype(const ModelConfig& cfg, std::vector<R>& x) {
  // An F32 pool needs no rounding for the float path, and the f64 truth path keeps full precision for it.
  if (cfg.state_dtype == DType::F32) return;
  for (auto& e : x) e = round_through(cfg.state_dtype, e);
}
template <class R>
void round_to_act_dtype(const ModelConfig& cfg, std::vector<R>& x) {
  if (cfg.act_dtype == DType::F32) return;
  for (auto& e : x) e = round_through(cfg.act_dtype, e);
}

template <class R>
void run_recurrent(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in, std::vector<R>& state,
                   std::vector<R>& o, std::vector<std::vector<R>>* states_after, const RecurrentOptions& opt) {
  cfg.validate();
  in.validate(cfg);
  p.validate(cfg);
  require(static_cast<std::int64_t>(state.size()) == cfg.state_elems(), "state", "has ", state.size(),
          " elements, expected HV*K*V = ", cfg.state_elems());
  o.assign(static_cast<std::size_t>(in.T) * cfg.HV * cfg.V, R(0));
  if (states_after) states_after->clear();
  for (int t = 0; t < in.T; ++t) {
    token_step<R>(cfg, p, in, t, state.data(), &o[static_cast<std::size_t>(t) * cfg.HV * cfg.V], nullptr, opt.hook);
    if (opt.round_state_each_token) round_to_state_dtype(cfg, state);
    if (states_after) states_after->push_back(state);
  }
  if (opt.round_outputs) round_to_act_dtype(cfg, o);
}

template <class R>
void run_chunked(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in, int chunk,
                 std::vector<R>& state, std::vector<R>& o) {
  using Mat = Eigen::Matrix<R, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  cfg.validate();
  in.validate(cfg);
  p.validate(cfg);
  require(chunk >= 1, "chunk", "must be >= 1, got ", chunk);
  require(static_cast<std::int64_t>(state.size()) == cfg.state_elems(), "state", "has ", state.size(),
          " elements, expected HV*K*V = ", cfg.state_elems());
  const int K = cfg.K, V = cfg.V;
  const R scale = static_cast<R>(cfg.scale());
  o.assign(static_cast<std::size_t>(in.T) * cfg.HV * V, R(0));
  for (int hv = 0; hv < cfg.HV; ++hv) {
    const int h = cfg.key_head(hv);
    R* Sraw = state.data() + static_cast<std::size_t>(hv) * K * V;
    Mat S(K, V);  // math orientation [K, V]
    for (int c = 0; c < K; ++c)
      for (int j = 0; j < V; ++j) S(c, j) = Sraw[state_index(cfg, c, j)];
    for (int t0 = 0; t0 < in.T; t0 += chunk) {
      const int C = std::min(chunk, in.T - t0);
      Mat Kn(C, K), Qs(C, K), Gam(C, K), Vv(C, V);
      Eigen::Matrix<R, Eigen::Dynamic, 1> beta(C);
      std::vector<R> g(static_cast<std::size_t>(cfg.a_width()));
      for (int r = 0; r < C; ++r) {
        const int t = t0 + r;
        const std::size_t off = (static_cast<std::size_t>(t) * cfg.H + h) * K;
        l2normalize<R>(cfg, &in.k[off], K, R(1), &Kn(r, 0));
        l2normalize<R>(cfg, &in.q[off], K, scale, &Qs(r, 0));
        log_decay<R>(cfg, p, in, t, hv, g.data());
        for (int c = 0; c < K; ++c) Gam(r, c) = (r ? Gam(r - 1, c) : R(0)) + g[cfg.op == Op::GDN ? 0 : c];
        beta(r) = beta_of<R>(cfg, in, t, hv);
        for (int j = 0; j < V; ++j) Vv(r, j) = in.v[(static_cast<std::size_t>(t) * cfg.HV + hv) * V + j];
      }
      // Right-hand side R_r = beta_r (v_r - (kn_r . exp(gamma_r))^T S0), then forward substitution.
      Mat Kdec = (Kn.array() * Gam.array().exp()).matrix();
      Mat U = (beta.asDiagonal() * (Vv - Kdec * S)).eval();
      for (int r = 0; r < C; ++r)
        for (int s = 0; s < r; ++s) {
          R a = 0;
          for (int c = 0; c < K; ++c) a += Kn(r, c) * Kn(s, c) * std::exp(Gam(r, c) - Gam(s, c));
          U.row(r) -= beta(r) * a * U.row(s);
        }
      // Outputs.
      Mat Qdec = (Qs.array() * Gam.array().exp()).matrix();
      Mat O = Qdec * S;
      for (int r = 0; r < C; ++r)
        for (int s = 0; s <= r; ++s) {
          R a = 0;
          for (int c = 0; c < K; ++c) a += Qs(r, c) * Kn(s, c) * std::exp(Gam(r, c) - Gam(s, c));
          O.row(r) += a * U.row(s);
        }
      for (int r = 0; r < C; ++r)
        for (int j = 0; j < V; ++j) o[(static_cast<std::size_t>(t0 + r) * cfg.HV + hv) * V + j] = O(r, j);
      // State at the end of the chunk.
      Mat Kend(C, K);
      for (int s = 0; s < C; ++s)
        for (int c = 0; c < K; ++c) Kend(s, c) = Kn(s, c) * std::exp(Gam(C - 1, c) - Gam(s, c));
      Eigen::Matrix<R, Eigen::Dynamic, 1> dend = Gam.row(C - 1).transpose().array().exp();
      S = (dend.asDiagonal() * S + Kend.transpose() * U).eval();
    }
    for (int c = 0; c < K; ++c)
      for (int j = 0; j < V; ++j) Sraw[state_index(cfg, c, j)] = S(c, j);
  }
}

template <class R>
std::vector<R> convert_layout(const ModelConfig& cfg, const std::vector<R>& state, StateLayout from, StateLayout to) {
  require(static_cast<std::int64_t>(state.size()) == cfg.state_elems(), "state", "has ", state.size(),
          " elements, expected HV*K*V = ", cfg.state_elems());
  if (from == to) return state;
  std::vector<R> out(state.size());
  ModelConfig cf = cfg, ct = cfg;
  cf.layout = from;
  ct.layout = to;
  const std::size_t head = static_cast<std::size_t>(cfg.K) * cfg.V;
  for (int hv = 0; hv < cfg.HV; ++hv)
    for (int c = 0; c < cfg.K; ++c)
      for (int j = 0; j < cfg.V; ++j)
        out[hv * head + state_index(ct, c, j)] = state[hv * head + state_index(cf, c, j)];
  return out;
}

#define REPLAYSSM_INSTANTIATE(R)                                                                                 \
  template R softplus<R>(R);                                                                                     \
  template R sigmoid<R>(R);                                                                                      \
  template void log_decay<R>(const ModelConfig&, const LayerParams&, const SequenceInputs&, int, int, R*);       \
  template R beta_of<R>(const ModelConfig&, const SequenceInputs&, int, int);                                    \
  template void l2normalize<R>(const ModelConfig&, const float*, int, R, R*);                                    \
  template void token_step<R>(const ModelConfig&, const LayerParams&, const SequenceInputs&, int, R*, R*,        \
                              TokenRecord<R>*, const TokenHook*);                                                \
  template void run_recurrent<R>(const ModelConfig&, const LayerParams&, const SequenceInputs&, std::vector<R>&, \
                                 std::vector<R>&, std::vector<std::vector<R>>*, const RecurrentOptions&);        \
  template void run_chunked<R>(const ModelConfig&, const LayerParams&, const SequenceInputs&, int,               \
                               std::vector<R>&, std::vector<R>&);                                                \
  template void round_to_state_dtype<R>(const ModelConfig&, std::vector<R>&);                                    \
  template void round_to_act_dtype<R>(const ModelConfig&, std::vector<R>&);                                      \
  template std::vector<R> convert_layout<R>(const ModelConfig&, const std::vector<R>&, StateLayout, StateLayout);

REPLAYSSM_INSTANTIATE(float)
REPLAYSSM_INSTANTIATE(double)
#undef REPLAYSSM_INSTANTIATE

}  // namespace replayssm::ref
