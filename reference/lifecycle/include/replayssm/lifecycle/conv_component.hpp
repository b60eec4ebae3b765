// replayssm/lifecycle/conv_component.hpp — the short-convolution state as an optional layer component of the
// kernel-level lifecycle (engine.hpp, target.hpp, judge.hpp): what a setup says about it, where a step's raw conv
// inputs come from, and the per-request truth the judge checks it against.
//
// The component (conv.hpp has the operation and its sources): every layer keeps, per slot, a conv window of
// W - 1 columns per channel ([C, W-1], channel-major, column 0 the oldest; C = 2*H*K + HV*V). A step's row
// runs the causal depthwise conv1d over its T tokens from the slot's window and returns y [T, C]; a verify
// row's commit rolls the window to its accepted length n (the last W - 1 columns of [window | x_1 .. x_n],
// nothing written for n = 0), a prefill row commits all T in the step, a fresh prefill starts from zeros
// whatever the slot holds, and a slot copy carries the window with the recurrent state.
//
// Raw inputs. The raw conv input of a token is the token's q, k and v values in the fused channel order of
// conv.hpp: x_t = [q_t (H*K) | k_t (H*K) | v_t (HV*V)] — the layout of the in_proj_qkv output the convolution
// consumes (HF Qwen3.5, vLLM / SGLang conv_dim). The recurrence keeps taking q, k, v as its post-convolution
// inputs (every fixture stays valid): the conv component reuses the same seeded token values as its raw input
// stream, so the windows follow exactly the tokens the recurrence commits, and the request's committed history
// is the conv component's history too.
//
// Truth (independent of any target's code path): a request's committed window is the last W - 1 raw input
// columns of its committed history since its last fresh start, each rounded to the conv state dtype, with
// zero columns where the history is shorter (conv_window_of_history); a row's outputs are conv_update
// (kernel-faithful binary32, conv.hpp) over the row's tokens from the request's window before the step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "replayssm/config.hpp"
#include "replayssm/recurrence/conv.hpp"
#include "replayssm/recurrence/gdn.hpp"

namespace replayssm::ref {

// The conv component of an EngineSetup: one ConvConfig for every layer (heads and dims of the model, the
// model's activation dtype) and one set of weights per layer, seeded by `seed`.
struct ConvSetup {
  ConvConfig cfg;
  std::uint64_t seed = 0;
  std::vector<ConvParams> params;  // one per layer

  // Error("<field>.<key>") when cfg does not match the model (heads, dims, act_dtype) or params do not match
  // cfg and num_layers.
  void validate(const ModelConfig& m, const std::string& field = "setup.conv") const;
  // {"kernel_size", "activation", "bias", "state_dtype", "seed" (decimal text)}: the rest follows the model.
  nlohmann::json to_json() const;
  // Reads to_json's form strictly (exactly those keys; kernel_size an integer in [2, 8]; activation "silu" or
  // "none"; bias a boolean; state_dtype "f32" / "bf16"; seed full-match decimal uint64 text) and regenerates
  // the weights; Error("<field>.<key>").
  static ConvSetup from_json(const nlohmann::json& j, const ModelConfig& m, const std::string& field = "setup.conv");
};
// The component for model m: conv_config_for(m) with the given kernel size, state dtype, activation and bias,
// weights random_conv_params(cfg, derive_seed(seed, 300 + layer)).
ConvSetup make_conv_setup(const ModelConfig& m, std::uint64_t seed, int kernel_size = 4,
                          DType state_dtype = DType::F32, ConvActivation activation = ConvActivation::Silu,
                          bool bias = false);

// The raw conv inputs of tokens [t0, t0 + n) of `in`: x [n, C] token-major, x_t = [q_t | k_t | v_t].
std::vector<float> conv_raw_inputs(const ModelConfig& m, const SequenceInputs& in, int t0, int n);
// The truth of a committed window: the last W - 1 columns of [zeros | x_1 .. x_T] (x [T, C] raw inputs),
// each rounded to cfg.state_dtype; [C, W-1].
std::vector<float> conv_window_of_history(const ConvConfig& cfg, const std::vector<float>& x, int T);

}  // namespace replayssm::ref
