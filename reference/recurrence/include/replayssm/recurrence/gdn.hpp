// replayssm/recurrence/gdn.hpp — the executable definition of the GDN and KDA recurrences (CPU).
//
// One (request, layer) at a time. Every function is instantiated for two precisions:
//   R = double — the "truth" path: the same formulas in binary64;
//   R = float  — the "kernel-faithful" path: binary32 with one rounding per operation (the project builds
//                with -ffp-contract=off), in the operation order the project's kernels use (below).
//
// Shapes (row-major, all float storage; values are already representable in the activation dtype):
//   q, k  [T, H, K]      v [T, HV, V]      b [T, HV]
//   a     [T, HV] (GDN)  or [T, HV, K] (KDA, one gate input per key channel)
//   A_log [HV]           dt_bias [HV] (GDN) or [HV * K] (KDA)
//   state [HV, K, V] (StateLayout::KV) or [HV, V, K] (StateLayout::VK)
//   o     [T, HV, V]
// Value head hv reads key head cfg.key_head(hv) = hv / (HV / H).
//
// Per token t and value head hv (sources: GDN arXiv 2412.06464 eq. for S_t; HF transformers
// torch_recurrent_gated_delta_rule in modeling_qwen3_5.py; FLA naive_recurrent_gated_delta_rule and
// naive_recurrent_kda; Kimi Linear arXiv 2510.26692):
//   1. k <- k / sqrt(sum k^2 + eps) (or k * (1/sqrt(...)), see L2Norm); q likewise, then q <- q * scale.
//   2. gate: x = a + dt_bias; softplus(x) = x if x > 20 else log1p(exp(x));
//        GDN: g = -exp(A_log) * softplus(x)            (one value per head)
//        KDA: g_c = -exp(A_log) * softplus(x_c)  or  g_c = lower_bound * sigmoid(exp(A_log) * x_c)
//      alpha = exp(g); beta = sigmoid(b) = 1 / (1 + exp(-b)), optionally rounded to the activation dtype.
//   3. decay:  S[k][v] <- alpha_k * S[k][v]
//   4. read:   kv[v] = sum_k S[k][v] * k[k]            (k ascending)
//   5. delta:  d[v] = beta * (v[v] - kv[v])
//   6. write:  S[k][v] <- S[k][v] + k[k] * d[v]
//   7. output: o[v] = sum_k S[k][v] * q[k]             (k ascending; sees this token's own write)
// The per-element operation sequence is identical for both layouts, so KV and VK results are bit-identical.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "replayssm/config.hpp"

namespace replayssm::ref {

// Per-request inputs of one layer for T tokens (see shapes above).
struct SequenceInputs {
  int T = 0;
  std::vector<float> q, k, v, a, b;

  // Throws Error("<prefix>.q" ...) when a length does not match cfg and T.
  void validate(const ModelConfig& cfg, const std::string& prefix = "inputs") const;
  // Tokens [t0, t0 + n) as a new SequenceInputs.
  SequenceInputs slice(const ModelConfig& cfg, int t0, int n) const;
  // Concatenation along T.
  static SequenceInputs concat(const ModelConfig& cfg, const SequenceInputs& x, const SequenceInputs& y);
};

// Per-layer parameters.
struct LayerParams {
  std::vector<float> A_log;    // [HV]
  std::vector<float> dt_bias;  // [HV] (GDN) or [HV*K] (KDA)
  void validate(const ModelConfig& cfg, const std::string& prefix = "params") const;
};

// --- scalar pieces (exposed so tests and the CUDA kernels' documentation can point at them) -----------
template <class R> R softplus(R x);  // x > 20 ? x : log1p(exp(x))  (torch softplus, beta=1, threshold=20)
template <class R> R sigmoid(R x);   // 1 / (1 + exp(-x))

// Log-decay for token t, value head hv: writes 1 value (GDN) or K values (KDA) to g_out.
template <class R>
void log_decay(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in, int t, int hv, R* g_out);
// beta for token t, value head hv (rounded through the activation dtype when cfg.round_beta_to_act).
template <class R>
R beta_of(const ModelConfig& cfg, const SequenceInputs& in, int t, int hv);
// L2-normalises x[0..n) into out (or copies when cfg.l2norm == None) and multiplies by mul afterwards.
template <class R>
void l2normalize(const ModelConfig& cfg, const float* x, int n, R mul, R* out);

// Offset of element (k, v) inside one head's state for the configured layout.
inline std::int64_t state_index(const ModelConfig& cfg, int k, int v) {
  return cfg.layout == StateLayout::KV ? static_cast<std::int64_t>(k) * cfg.V + v
                                       : static_cast<std::int64_t>(v) * cfg.K + k;
}

// What one token contributes to the state, in the corrected-update form S_t = Diag(alpha) S_{t-1} + k u^T:
// u [HV, V] (= the delta d of step 5), k [H, K] (normalised keys), g [HV, a_width] (log-decay).
template <class R>
struct TokenRecord {
  std::vector<R> u, k, g;
};

// A test-only perturbation of the token step. The teeth catalogue (fault.hpp) injects its math faults
// (a wrong key head, a missing decay, beta rounded in one path) through this hook instead of a copy of the
// step, so the arithmetic a fault leaves alone is the step's own. Production paths pass nullptr.
struct TokenHook {
  virtual ~TokenHook() = default;
  // Key head read by value head hv; the step's own rule is cfg.key_head(hv) (block mapping).
  virtual int key_head(const ModelConfig& cfg, int hv) const { return cfg.key_head(hv); }
  // The decay alpha of one channel and beta of one value head, as the step will use them.
  virtual double alpha(double a) const { return a; }
  virtual double beta(double b) const { return b; }
  // Each operand of the two dot products (kv = S^T k, o = S^T q) as it enters the product: a precision
  // emulation (TF32 operands) rounds it; the step's own arithmetic is unchanged otherwise.
  virtual double dot_operand(double x) const { return x; }
  // The output read from the state before the token's rank-1 write (decayed only), a fault of the catalogue.
  virtual bool output_before_update() const { return false; }
  // The l2norm form q and k are normalised with, given the configuration's (a fault may place eps elsewhere).
  virtual L2Norm l2norm(L2Norm configured) const { return configured; }
};

// Advances the state by token t of `in` for every value head and writes o_t [HV, V] (unrounded).
// state has cfg.state_elems() elements in cfg.layout. If rec is non-null it receives the token's record.
// hook (tests only) perturbs the step; a null hook is the definition above.
template <class R>
void token_step(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in, int t, R* state, R* o_t,
                TokenRecord<R>* rec = nullptr, const TokenHook* hook = nullptr);

// Options of the multi-token recurrent form.
struct RecurrentOptions {
  // Round the state to cfg.state_dtype after every token and continue from the rounded value (models T
  // separate single-token kernel calls on a bf16 pool). Off: fp32/f64 state in registers for the whole call.
  bool round_state_each_token = false;
  // Round every output to cfg.act_dtype (what a kernel stores). Off for math comparisons.
  bool round_outputs = false;
  // Test-only perturbation of every token step (see TokenHook); null in every production path.
  const TokenHook* hook = nullptr;
};

// Runs tokens [0, in.T) from `state` (updated in place). o: [T, HV, V]. If states_after is non-null it
// receives the state after each token (T entries, each HV*K*V, in cfg.layout, unrounded unless
// round_state_each_token). Throws Error on shape mismatch.
template <class R>
void run_recurrent(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in, std::vector<R>& state,
                   std::vector<R>& o, std::vector<std::vector<R>>* states_after = nullptr,
                   const RecurrentOptions& opt = {});

// Chunked (UT-transform / WY) form of the same recurrence for chunk size C in {16, 32, 64} (any positive
// C is accepted); T need not be a multiple of C (the last chunk is shorter; no padding is materialised).
// Per chunk, with cumulative log-decays gamma_r (per channel for KDA) and kn, qs the normalised keys /
// scaled queries:
//   A[r][s] = beta_r * sum_c kn_r[c] kn_s[c] exp(gamma_r[c] - gamma_s[c])        (s < r)
//   (I + A) U = beta * (V - (Kn . exp(gamma)) S0)                               (forward substitution)
//   O[r]    = (qs_r . exp(gamma_r))^T S0 + sum_{s<=r} (sum_c qs_r[c] kn_s[c] exp(gamma_r[c]-gamma_s[c])) U[s]
//   S_C     = Diag(exp(gamma_C)) S0 + sum_s (kn_s . exp(gamma_C - gamma_s)) U[s]^T
// (FLA naive_chunk_gated_delta_rule / naive_chunk_kda; HF torch_chunk_gated_delta_rule.) Equal to
// run_recurrent in exact arithmetic; only rounding differs. Outputs and state are unrounded.
template <class R>
void run_chunked(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in, int chunk,
                 std::vector<R>& state, std::vector<R>& o);

// Rounds every element to cfg.state_dtype / cfg.act_dtype (identity for F32 storage of float values).
template <class R> void round_to_state_dtype(const ModelConfig& cfg, std::vector<R>& x);
template <class R> void round_to_act_dtype(const ModelConfig& cfg, std::vector<R>& x);

// Converts one request's state between layouts ([HV,K,V] <-> [HV,V,K]).
template <class R>
std::vector<R> convert_layout(const ModelConfig& cfg, const std::vector<R>& state, StateLayout from, StateLayout to);

}  // namespace replayssm::ref
