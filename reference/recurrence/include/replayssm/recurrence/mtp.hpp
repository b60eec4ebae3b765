// replayssm/recurrence/mtp.hpp — full-state MTP (the oracle) and the two ReplaySSM designs, per request and
// per layer, in the float kernel-faithful path.
//
// Verify T = 1 + num_draft tokens from the checkpoint S_0. S_t is the state after window token t (1-based).
// Commit for an accepted length n in [0, T] (n counts the target/bonus token) makes S_n the checkpoint;
// n = 0 leaves the checkpoint bitwise unchanged; n outside [0, T] is Error("accepted"), never a clamp.
//
// Design 1 — raw payload (TokenSpeed / SGLang fold / FlashInfer raw-window style): verify computes the same
// outputs without storing any state and captures the raw per-token inputs (k, v, a, b in the activation
// dtype); commit replays the first n tokens through the same token step. Because the operation sequence is
// the same, the committed state is bit-identical to full-state S_n stored with StateRounding::AtCommit.
//
// Design 2 — corrected-update ring (vLLM / SGLang ReplaySSM): per token the record (u, k, g) with
// u = beta (v - alpha S_{t-1}^T k) (the delta), k normalised, g the log-decay. The state after m records is
//   S_m = exp(G_m) S_0 + sum_j exp(G_m - G_j) k_j u_j^T      (row c scaled per channel for KDA)
// with G_j = g_1 + ... + g_j. Reconstruction::Serial folds the records one by one in the token step's order
// (bit-exact with the recurrence when records are stored in F32); Reconstruction::ClosedForm evaluates the
// sum above and reads the token in the split form o = alpha (S_m^T q) + u (k . q) (tolerance-based).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "replayssm/config.hpp"
#include "replayssm/recurrence/gdn.hpp"
#include "replayssm/step.hpp"

namespace replayssm::ref {

// How a full-state verify stores its intermediate states in a BF16 pool:
//   AtCommit — the running state stays F32 inside the verify; each stored S_t is rounded once (a fused MTP
//              kernel with F32 registers). Raw replay matches this bit for bit.
//   PerToken — the state is rounded after every token and the next token continues from the rounded state
//              (T separate single-token calls). Raw replay differs from this by a bounded amount.
// For an F32 pool the two are identical.
enum class StateRounding : std::uint8_t { AtCommit, PerToken };

struct FullStateVerify {
  std::vector<float> o;                    // [T, HV, V], rounded to act dtype
  std::vector<std::vector<float>> states;  // states[t-1] = S_t in cfg.layout, rounded to state dtype
};
// S0 is the checkpoint (HV*K*V, values representable in the state dtype).
FullStateVerify full_state_verify(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in,
                                  const std::vector<float>& S0, StateRounding rounding);
// The committed checkpoint for accepted length n: S0 when n = 0, else states[n-1].
std::vector<float> full_state_commit(const FullStateVerify& v, const std::vector<float>& S0, int n);

// Raw replay payload of one request: the inputs minus q (q is never needed to advance the state).
struct RawPayload {
  int T = 0;
  std::vector<float> k, v, a, b;  // same shapes as SequenceInputs
  // The payload as token inputs for a replay: k, v, a, b as captured, q zero (it does not touch the state).
  SequenceInputs inputs() const;
};
struct ReplayVerify {
  std::vector<float> o;  // [T, HV, V], rounded to act dtype; bit-identical to FullStateVerify::o
  RawPayload payload;
};
ReplayVerify replay_verify(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in,
                           const std::vector<float>& S0, const TokenHook* hook = nullptr);
// Replays payload tokens [0, n) from S0 in F32, rounds once to the state dtype. n = 0 returns S0 unchanged.
// hook: test-only perturbation of the token step (TokenHook), null otherwise.
std::vector<float> replay_commit(const ModelConfig& cfg, const LayerParams& p, const RawPayload& payload,
                                 const std::vector<float>& S0, int n, const TokenHook* hook = nullptr);

// --- corrected-update records ----------------------------------------------------------------------------
// How the state after m records is rebuilt from the checkpoint, and how the token after them is read:
//   Serial     — fold record j as S <- alpha_j S + k_j u_j^T, oldest first (the token step's own operations),
//                then the token step: bit-exact with the recurrence for F32 records;
//   ClosedForm — S_m = exp(G_m) S_0 + sum_j exp(G_m - G_j) k_j u_j^T with inclusive prefix sums G_j, then the
//                token in the split form o = alpha (S_m^T q) + u (k . q) (a ring kernel that never forms the
//                updated state); loses precision when |G| is large (docs/numerics.md);
//   SuffixSum  — the CUDA ring_decode order: S_m = exp(W_0) S_0 + sum_j (exp(W_j) k_j) u_j^T with the suffix
//                sums W_j = g_{j+1} + ... + g_{m-1} (W_0 also adding g_0) accumulated from the newest record
//                down, then the token step on S_m.
enum class Reconstruction : std::uint8_t { Serial, ClosedForm, SuffixSum };
std::string to_string(Reconstruction r);                                        // "serial", "closed_form", "suffix_sum"
Reconstruction parse_reconstruction(const std::string& s, const std::string& field = "recon");

using Record = TokenRecord<float>;

// State after folding `records` (in logical order) into S0; F32, unrounded. factored_weights (tests only: the
// catalogue fault decay_weights_factored, fault.hpp) makes ClosedForm form each weight exp(G_m - G_j) as
// exp(G_m) * exp(-G_j), which overflows to inf * 0 = NaN once |G| passes ~88 (large |g| of trained models).
std::vector<float> reconstruct(const ModelConfig& cfg, const std::vector<float>& S0,
                               const std::vector<const Record*>& records, Reconstruction mode,
                               bool factored_weights = false);

// One token read against a reconstructed state S (the state before the token): returns o_t [HV, V]
// (unrounded) and the token's record. Serial and SuffixSum advance S in place exactly like token_step;
// ClosedForm leaves S untouched and uses the split form.
std::vector<float> ring_token(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in, int t,
                              std::vector<float>& S, Record& rec, Reconstruction mode);

// Rounds a record's u and k to `dtype` (the ring storage dtype; g always stays F32).
void round_record(Record& rec, DType dtype);

// Decode ring (standard decode, T = 1 per step) of ring_len records: the checkpoint plus up to ring_len-1
// records. A step with write_pos == ring_len-1 is a flush: it folds the ring_len-1 records and the current
// token into the checkpoint (rounded to the state dtype) and resets write_pos to 0; any other step appends
// its record. ring_len = 1 flushes every step.
struct DecodeRing {
  int ring_len = 16;
  int write_pos = 0;
  std::vector<Record> records;  // physical slots 0..ring_len-2
};
// Runs one decode token: returns o [HV, V] rounded to act dtype; updates checkpoint / ring.
std::vector<float> decode_ring_step(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in, int t,
                                    std::vector<float>& checkpoint, DecodeRing& ring, Reconstruction mode,
                                    DType record_dtype);

}  // namespace replayssm::ref
