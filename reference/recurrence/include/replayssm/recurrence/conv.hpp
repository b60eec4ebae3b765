// replayssm/recurrence/conv.hpp — the short convolution of a GDN/KDA layer and its state under speculative
// decoding: an optional layer component, separate from the recurrence (gdn.hpp), whose outputs are the
// post-convolution q, k, v that the recurrence and every other fixture take as inputs.
//
// What it computes (one request, one layer). The projections give one raw input column x_t [C] per token;
// a causal depthwise conv1d of kernel size W runs over every channel separately, then an activation:
//   E = [S | x_1 .. x_T]                          the W-1 state columns followed by the window, per channel
//   y_t[c] = act(b[c] + sum_{j=0}^{W-1} w[c][j] * E[c][t-1 + j])      t = 1..T (E 0-based)
//   act = SiLU: z / (1 + exp(-z)), or none
// so w[c][W-1] multiplies the current token and w[c][0] the oldest state column (cross-correlation, as
// torch F.conv1d and the causal_conv1d kernels compute it). The conv state after token t is the last W-1
// columns of [S | x_1 .. x_t]: the raw (pre-convolution) inputs, never the outputs.
// Sources: HF transformers modeling_qwen3_next.py / modeling_qwen3_5.py (torch_causal_conv1d_update: concat
// state and inputs, F.conv1d with groups = channels, keep the last columns as the new state, SiLU after the
// conv); vLLM vllm/model_executor/layers/mamba/ops/causal_conv1d.py at commit 03c6dad (causal_conv1d_update
// and its Triton kernel: fp32 accumulator started at the bias, taps added oldest first, the current token
// last, SiLU as acc / (1 + exp(-acc)); with spec decoding the read offset is num_accepted_tokens - 1, i.e.
// the committed window ends at accepted token n); SGLang mem_cache/memory_pool.py (intermediate_conv_window_cache, one window per draft token, committed
// at accepted_len - 1). Qwen3-Next / Qwen3.5 and Kimi Linear use W = 4, SiLU and no bias.
//
// Channels and layouts:
//   channels C = 2*H*K + HV*V in the order [q (H*K) | k (H*K) | v (HV*V)], head-major inside each part
//     (HF Qwen3.5 in_proj_qkv, vLLM/SGLang conv_dim). Kimi Linear runs three separate convolutions over
//     q, k and v; a depthwise convolution treats every channel alone, so they are the same computation on
//     the three channel ranges of this fused layout (SGLang's KDA conv state is one fused tensor too).
//   x, y        [T, C] token-major (the packed token arrays of a step)
//   state       [C, W-1] channel-major, column 0 the oldest (vLLM/SGLang conv_state [.., dim, W-1])
//   weight      [C, W]   (the conv1d weight [C, 1, W] without its unit axis); bias [C]
//   states      [T, C, W-1]: the state after each token of a verify window (full-state MTP)
// Dtypes: x, y, weight and bias are in the activation dtype (F32 or BF16: the model dtype the engines keep
// the conv weights in); the state is F32 or BF16 (conv_state_dtype; SGLang and vLLM keep it in the model
// dtype). A state column holds x rounded to the state dtype; inside one call the outputs read the window's
// own x unrounded (as the kernels do: the window is loaded from x, only the stored state is rounded).
//
// Precisions: R = double ("truth") and R = float ("kernel-faithful": binary32, one rounding per operation,
// -ffp-contract=off, the accumulation order above). The state results involve no arithmetic (copies and
// one rounding to the state dtype), so they are identical in both precisions.
//
// Speculative decoding. Verify T tokens from the committed state S, accept n in [0, T]; the committed state
// is the last W-1 columns of [S | x_1 .. x_n] (n = 0: S itself). Two designs produce it:
//   full-state MTP — conv_update keeps the state after every token; commit picks states[n-1] (or S);
//   ReplaySSM      — keep S (the checkpoint) and the window's raw x; commit recomputes the columns at n.
// Both are data movement of the same values, so they agree bit for bit (conv_commit_* below).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "replayssm/config.hpp"
#include "replayssm/dtype.hpp"

namespace replayssm::ref {

enum class ConvActivation : std::uint8_t { Silu, None };
std::string to_string(ConvActivation a);
ConvActivation parse_conv_activation(const std::string& s, const std::string& field);

struct ConvConfig {
  std::string name = "custom";
  int H = 1, HV = 1, K = 2, V = 2;  // the layer's heads and head dims: they fix the channels
  int kernel_size = 4;              // W, in [2, 8]; the state has W - 1 columns
  ConvActivation activation = ConvActivation::Silu;
  bool bias = false;
  DType act_dtype = DType::BF16;    // x, y, weight, bias: F32 or BF16
  DType state_dtype = DType::BF16;  // the conv state: F32 or BF16

  std::int64_t qk_channels() const { return static_cast<std::int64_t>(H) * K; }
  std::int64_t v_channels() const { return static_cast<std::int64_t>(HV) * V; }
  std::int64_t channels() const { return 2 * qk_channels() + v_channels(); }
  int state_cols() const { return kernel_size - 1; }
  std::int64_t state_elems() const { return channels() * state_cols(); }
  // Throws Error("<field>.<key>") for the first invalid field (heads, dims, kernel_size, dtypes).
  void validate(const std::string& field = "conv") const;
};
// The conv component of a model configuration: its heads and dims, W = 4, SiLU, no bias (Qwen3-Next, Qwen3.5,
// Kimi Linear), the model's activation dtype for the inputs and the state.
ConvConfig conv_config_for(const ModelConfig& m);
nlohmann::json to_json(const ConvConfig& c);  // also records "channels" (derived, checked on read)
// Every key is required; Error("<field>.<key>") for a missing or malformed one, then validate().
ConvConfig conv_config_from_json(const nlohmann::json& j, const std::string& field = "config.conv");

struct ConvParams {
  std::vector<float> weight;  // [C, W], values representable in the activation dtype
  std::vector<float> bias;    // [C] when cfg.bias, else empty
  void validate(const ConvConfig& c, const std::string& prefix = "param") const;
};
ConvParams random_conv_params(const ConvConfig& c, std::uint64_t seed);
// Raw inputs x [T, C] in the activation dtype; a state [C, W-1] in the state dtype.
std::vector<float> random_conv_inputs(const ConvConfig& c, int T, std::uint64_t seed);
std::vector<float> random_conv_state(const ConvConfig& c, std::uint64_t seed);

enum class ConvPrecision : std::uint8_t { Truth, KernelFaithful };

struct ConvWindowResult {
  std::vector<float> y;                    // [T, C] rounded to the activation dtype
  std::vector<std::vector<float>> states;  // states[t] [C, W-1]: after token t+1 (keep_states), state dtype
  std::vector<float> final_state;          // [C, W-1]: after token T, state dtype
};
// One call over T tokens from `state` ([C, W-1]; empty = zeros, a fresh prefill that left-pads W-1 zeros).
// Throws Error("x" / "state" / "param.*") for lengths that do not match cfg and T (T >= 1).
ConvWindowResult conv_update(const ConvConfig& cfg, const ConvParams& p, const std::vector<float>& state,
                             const std::vector<float>& x, int T, ConvPrecision prec, bool keep_states);

// The committed state after accepting n of a window of T tokens (Error("accepted") unless 0 <= n <= T):
//   full-state MTP: `states` as conv_update keeps them; n = 0 keeps `state`;
//   ReplaySSM: from the checkpoint `state` and the window's raw x alone.
std::vector<float> conv_commit_full_state(const std::vector<float>& state,
                                          const std::vector<std::vector<float>>& states, int n);
std::vector<float> conv_commit_replay(const ConvConfig& cfg, const std::vector<float>& state,
                                      const std::vector<float>& x, int T, int n);

// vLLM's spec-decoding layout of the same state (causal_conv1d_update with num_accepted_tokens): one buffer of
// L = W - 2 + T columns per channel ([C, L], T = 1 + num_spec) and a read offset o = n - 1 into it, so the
// state is buffer[:, o .. o + W - 2] and no copy happens at commit time. A verify of T tokens rewrites the
// buffer as [state columns 1 .. W-2 | x_1 .. x_T] (the oldest state column drops out); accepting n >= 1
// tokens then sets the offset to n - 1. n = 0 has no offset in this layout (vLLM always accepts at least the
// target's own token), so conv_sliding_offset refuses it.
//   conv_sliding_state: the [C, W-1] state a buffer holds at an offset; Error("offset") outside [0, L-W+1].
//   conv_sliding_verify: the buffer after a verify of x [T, C] from the state at `offset`, in the state dtype.
std::vector<float> conv_sliding_state(const ConvConfig& cfg, const std::vector<float>& buffer, int L, int offset);
std::vector<float> conv_sliding_verify(const ConvConfig& cfg, const std::vector<float>& buffer, int L, int offset,
                                       const std::vector<float>& x, int T);
int conv_sliding_offset(int accepted, int T);  // n - 1; Error("accepted") unless 1 <= n <= T

// The bound an fp32 implementation's y must meet against the truth (docs/numerics.md, "Short convolution"):
//   allclose(atol = 2 (W+1) u max(1, M), rtol = R) with u = 2^-24, M = max over tokens and channels of
//   |b| + sum_j |w_j E_j| (the terms of the sum), R = 2^-17 for the SiLU's evaluation (none: 0), plus 2^-7
//   (one bf16 ulp of the stored value) when y is stored in BF16.
double conv_term_magnitude(const ConvConfig& cfg, const ConvParams& p, const std::vector<float>& state,
                           const std::vector<float>& x, int T);
struct ConvOutputBound {
  double atol = 0, rtol = 0;
};
ConvOutputBound conv_output_bound(const ConvConfig& cfg, double term_magnitude);

}  // namespace replayssm::ref
