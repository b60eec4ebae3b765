#include "replayssm/recurrence/mtp.hpp"

#include <cmath>

#include "replayssm/error.hpp"

namespace replayssm::ref {

namespace {
void check_state(const ModelConfig& cfg, const std::vector<float>& S, const char* field) {
  require(static_cast<std::int64_t>(S.size()) == cfg.state_elems(), field, "has ", S.size(),
          " elements, expected HV*K*V = ", cfg.state_elems());
}
void check_n(int n, int T) { require(n >= 0 && n <= T, "accepted", "is ", n, ", outside [0, T=", T, "]"); }
std::size_t hv_base(const ModelConfig& cfg, int hv) { return static_cast<std::size_t>(hv) * cfg.K * cfg.V; }
}  // namespace

FullStateVerify full_state_verify(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in,
                                  const std::vector<float>& S0, StateRounding rounding) {
  check_state(cfg, S0, "checkpoint");
  FullStateVerify r;
  std::vector<float> S = S0;
  RecurrentOptions opt;
  opt.round_state_each_token = rounding == StateRounding::PerToken;
  opt.round_outputs = true;
  run_recurrent<float>(cfg, p, in, S, r.o, &r.states, opt);
  for (auto& s : r.states) round_to_state_dtype(cfg, s);
  return r;
}

std::vector<float> full_state_commit(const FullStateVerify& v, const std::vector<float>& S0, int n) {
  check_n(n, static_cast<int>(v.states.size()));
  return n == 0 ? S0 : v.states[static_cast<std::size_t>(n) - 1];
}

ReplayVerify replay_verify(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in,
                           const std::vector<float>& S0, const TokenHook* hook) {
  check_state(cfg, S0, "checkpoint");
  ReplayVerify r;
  std::vector<float> S = S0;  // a private copy: the checkpoint itself is never written by verify
  RecurrentOptions opt;
  opt.round_outputs = true;
  opt.hook = hook;
  run_recurrent<float>(cfg, p, in, S, r.o, nullptr, opt);
  r.payload.T = in.T;
  r.payload.k = in.k;
  r.payload.v = in.v;
  r.payload.a = in.a;
  r.payload.b = in.b;
  return r;
}

SequenceInputs RawPayload::inputs() const {
  SequenceInputs in;
  in.T = T;
  in.k = k;
  in.v = v;
  in.a = a;
  in.b = b;
  in.q.assign(k.size(), 0.0f);  // q does not influence the state
  return in;
}

std::vector<float> replay_commit(const ModelConfig& cfg, const LayerParams& p, const RawPayload& payload,
                                 const std::vector<float>& S0, int n, const TokenHook* hook) {
  check_state(cfg, S0, "checkpoint");
  check_n(n, payload.T);
  std::vector<float> S = S0;
  if (n == 0) return S;
  std::vector<float> o;
  RecurrentOptions opt;
  opt.hook = hook;
  run_recurrent<float>(cfg, p, payload.inputs().slice(cfg, 0, n), S, o, nullptr, opt);
  round_to_state_dtype(cfg, S);
  return S;
}

std::string to_string(Reconstruction r) {
  switch (r) {
    case Reconstruction::Serial: return "serial";
    case Reconstruction::ClosedForm: return "closed_form";
    case Reconstruction::SuffixSum: return "suffix_sum";
  }
  return "serial";
}

Reconstruction parse_reconstruction(const std::string& s, const std::string& field) {
  for (auto r : {Reconstruction::Serial, Reconstruction::ClosedForm, Reconstruction::SuffixSum})
    if (s == to_string(r)) return r;
  fail(field, "unknown reconstruction '", s, "' (known: serial, closed_form, suffix_sum)");
}

std::vector<float> reconstruct(const ModelConfig& cfg, const std::vector<float>& S0,
                               const std::vector<const Record*>& records, Reconstruction mode, bool factored_weights) {
  check_state(cfg, S0, "checkpoint");
  const int K = cfg.K, V = cfg.V, aw = cfg.a_width();
  std::vector<float> S = S0;
  if (records.empty()) return S;
  if (mode == Reconstruction::Serial) {
    for (const Record* r : records)
      for (int hv = 0; hv < cfg.HV; ++hv) {
        const float* kh = &r->k[static_cast<std::size_t>(cfg.key_head(hv)) * K];
        const float* g = &r->g[static_cast<std::size_t>(hv) * aw];
        const float* u = &r->u[static_cast<std::size_t>(hv) * V];
        float* Sh = S.data() + hv_base(cfg, hv);
        for (int j = 0; j < V; ++j)
          for (int c = 0; c < K; ++c) {
            float& s = Sh[state_index(cfg, c, j)];
            s = std::exp(g[aw == 1 ? 0 : c]) * s;
            s = s + kh[c] * u[j];
          }
      }
    return S;
  }
  const std::size_t m = records.size();
  if (mode == Reconstruction::SuffixSum) {
    // Suffix sums from the newest record down (the CUDA ring_decode order): S_0 is scaled by the exp of all
    // log-decays, then record j (newest first) adds u_j (exp(W_j) k_j)^T with W_j = g_{j+1} + ... + g_{m-1}.
    for (int hv = 0; hv < cfg.HV; ++hv) {
      float* Sh = S.data() + hv_base(cfg, hv);
      for (int c = 0; c < K; ++c) {
        const int gc = aw == 1 ? 0 : c;
        float total = 0.0f;
        for (std::size_t r = m; r-- > 0;) total += records[r]->g[static_cast<std::size_t>(hv) * aw + gc];
        const float e0 = std::exp(total);
        for (int j = 0; j < V; ++j) Sh[state_index(cfg, c, j)] = e0 * Sh[state_index(cfg, c, j)];
        float W = 0.0f;
        for (std::size_t r = m; r-- > 0;) {
          const float* kh = &records[r]->k[static_cast<std::size_t>(cfg.key_head(hv)) * K];
          const float kw = std::exp(W) * kh[c];
          const float* u = &records[r]->u[static_cast<std::size_t>(hv) * V];
          for (int j = 0; j < V; ++j) {
            float& s = Sh[state_index(cfg, c, j)];
            s = s + u[j] * kw;
          }
          W += records[r]->g[static_cast<std::size_t>(hv) * aw + gc];
        }
      }
    }
    return S;
  }
  // Closed form: per channel c, G_m[c] = sum of all log-decays; weight of record j: exp(G_m - G_j).
  for (int hv = 0; hv < cfg.HV; ++hv) {
    std::vector<float> G(m * static_cast<std::size_t>(aw));  // inclusive prefix sums
    for (std::size_t j = 0; j < m; ++j)
      for (int c = 0; c < aw; ++c)
        G[j * aw + c] = (j ? G[(j - 1) * aw + c] : 0.0f) + records[j]->g[static_cast<std::size_t>(hv) * aw + c];
    float* Sh = S.data() + hv_base(cfg, hv);
    for (int c = 0; c < K; ++c) {
      const int gc = aw == 1 ? 0 : c;
      const float Gm = G[(m - 1) * aw + gc];
      const float total = std::exp(Gm);
      for (int j = 0; j < V; ++j) {
        float acc = total * Sh[state_index(cfg, c, j)];
        for (std::size_t r = 0; r < m; ++r) {
          const float w = factored_weights ? std::exp(Gm) * std::exp(-G[r * aw + gc]) : std::exp(Gm - G[r * aw + gc]);
          acc += w * records[r]->k[static_cast<std::size_t>(cfg.key_head(hv)) * K + c] *
                 records[r]->u[static_cast<std::size_t>(hv) * V + j];
        }
        Sh[state_index(cfg, c, j)] = acc;
      }
    }
  }
  return S;
}

std::vector<float> ring_token(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in, int t,
                              std::vector<float>& S, Record& rec, Reconstruction mode) {
  check_state(cfg, S, "state");
  std::vector<float> o(static_cast<std::size_t>(cfg.HV) * cfg.V);
  if (mode != Reconstruction::ClosedForm) {  // Serial and SuffixSum read the token with the token step
    token_step<float>(cfg, p, in, t, S.data(), o.data(), &rec);
    return o;
  }
  const int K = cfg.K, V = cfg.V, aw = cfg.a_width();
  const float scale = static_cast<float>(cfg.scale());
  std::vector<float> kn(static_cast<std::size_t>(cfg.H) * K), qs(kn.size());
  for (int h = 0; h < cfg.H; ++h) {
    const std::size_t off = (static_cast<std::size_t>(t) * cfg.H + h) * K;
    l2normalize<float>(cfg, &in.k[off], K, 1.0f, &kn[static_cast<std::size_t>(h) * K]);
    l2normalize<float>(cfg, &in.q[off], K, scale, &qs[static_cast<std::size_t>(h) * K]);
  }
  rec.k = kn;
  rec.u.assign(static_cast<std::size_t>(cfg.HV) * V, 0.0f);
  rec.g.assign(static_cast<std::size_t>(cfg.HV) * aw, 0.0f);
  std::vector<float> alpha(static_cast<std::size_t>(K));
  for (int hv = 0; hv < cfg.HV; ++hv) {
    const float* kh = &kn[static_cast<std::size_t>(cfg.key_head(hv)) * K];
    const float* qh = &qs[static_cast<std::size_t>(cfg.key_head(hv)) * K];
    float* g = &rec.g[static_cast<std::size_t>(hv) * aw];
    log_decay<float>(cfg, p, in, t, hv, g);
    for (int c = 0; c < K; ++c) alpha[c] = std::exp(g[aw == 1 ? 0 : c]);
    const float beta = beta_of<float>(cfg, in, t, hv);
    float kq = 0;
    for (int c = 0; c < K; ++c) kq += kh[c] * qh[c];
    const float* vv = &in.v[(static_cast<std::size_t>(t) * cfg.HV + hv) * V];
    const float* Sh = S.data() + hv_base(cfg, hv);
    for (int j = 0; j < V; ++j) {
      float read_k = 0, read_q = 0;  // (alpha . k)^T S[:, j] and (alpha . q)^T S[:, j]
      for (int c = 0; c < K; ++c) {
        const float s = Sh[state_index(cfg, c, j)];
        read_k += (alpha[c] * kh[c]) * s;
        read_q += (alpha[c] * qh[c]) * s;
      }
      const float u = beta * (vv[j] - read_k);
      rec.u[static_cast<std::size_t>(hv) * V + j] = u;
      o[static_cast<std::size_t>(hv) * V + j] = read_q + u * kq;
    }
  }
  return o;
}

void round_record(Record& rec, DType dtype) {
  for (auto& x : rec.u) x = round_to(dtype, x);
  for (auto& x : rec.k) x = round_to(dtype, x);
}

std::vector<float> decode_ring_step(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in, int t,
                                    std::vector<float>& checkpoint, DecodeRing& ring, Reconstruction mode,
                                    DType record_dtype) {
  require(ring.ring_len >= 1, "ring.ring_len", "must be >= 1, got ", ring.ring_len);
  require(ring.write_pos >= 0 && ring.write_pos <= ring.ring_len - 1, "ring.write_pos", "is ", ring.write_pos,
          ", outside [0, ring_len-1=", ring.ring_len - 1, "]");
  std::vector<const Record*> live;
  for (int j = 0; j < ring.write_pos; ++j) live.push_back(&ring.records.at(static_cast<std::size_t>(j)));
  std::vector<float> S = reconstruct(cfg, checkpoint, live, mode);
  Record rec;
  std::vector<float> o = ring_token(cfg, p, in, t, S, rec, mode);
  round_record(rec, record_dtype);
  if (ring.write_pos == ring.ring_len - 1) {
    // Flush: fold the current token too (Serial and SuffixSum already advanced S; ClosedForm folds its record
    // now).
    if (mode == Reconstruction::ClosedForm) S = reconstruct(cfg, S, {&rec}, Reconstruction::ClosedForm);
    round_to_state_dtype(cfg, S);
    checkpoint = S;
    ring.write_pos = 0;
  } else {
    if (ring.records.size() < static_cast<std::size_t>(ring.ring_len - 1))
      ring.records.resize(static_cast<std::size_t>(ring.ring_len - 1));
    ring.records[static_cast<std::size_t>(ring.write_pos)] = rec;
    ++ring.write_pos;
  }
  round_to_act_dtype(cfg, o);
  return o;
}

}  // namespace replayssm::ref
