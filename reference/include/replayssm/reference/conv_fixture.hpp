// replayssm/reference/conv_fixture.hpp — fixtures of the short convolution (conv.hpp; docs/fixture-format.md
// section 11). They stand apart from the recurrence's fixtures, whose q, k, v are post-convolution inputs.
//
//   conv.prefill  in.x [T, C] (act)  in.state [C, W-1] (state; zeros = a fresh prompt)  param.weight [C, W] (act)
//                 [param.bias [C] (act)]                  -> out.y [T, C] (act)  out.state [C, W-1] (state)
//   conv.update   the same inputs (a verify window)      -> out.y [T, C]  out.states [T, C, W-1]: after each token
//   conv.commit   in.state [C, W-1] (the checkpoint)  in.x [T, C] (the window's raw inputs)  in.accepted I32 []
//                                                          -> out.state [C, W-1]: committed at accepted n
// config: {"conv": ConvConfig JSON (conv.hpp to_json), "args": {"case": tag}}. out.y: allclose from
// conv_output_bound (fp32 arithmetic against the f64 truth, W+1 terms per output); every state: exact (the
// state is data movement: copies and one rounding to the state dtype).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "replayssm/reference/golden.hpp"

namespace replayssm::ref {

inline constexpr const char* kConvPrefillOp = "conv.prefill";
inline constexpr const char* kConvUpdateOp = "conv.update";
inline constexpr const char* kConvCommitOp = "conv.commit";
bool is_conv_op(const std::string& op);

// Runs a conv.* op on a fixture's in.* / param.* tensors (the truth path) and returns the out.* tensors.
// Error naming the tensor or config key: a missing input, a wrong dtype or shape, accepted outside [0, T], a
// param.bias present without config.conv.bias (or missing with it), an unknown op ("op").
std::map<std::string, Tensor> run_conv_op(const std::string& op, const nlohmann::json& config,
                                          const std::map<std::string, Tensor>& tensors);

// The conv cases of a model preset (its heads and dims): fresh and chunked prefill, verify windows of 1, 3, 4
// tokens, commits with n = 0, a partial n, n = T, and n < W-1 (old state columns kept); kernel sizes 2, 4, 6,
// SiLU and none, with and without bias, F32 / BF16 inputs and state. Presets with C > 1024 (the real model
// sizes) get one update and one commit, to keep the files small.
std::vector<GoldenCase> conv_cases(const ModelConfig& cfg, std::uint64_t seed);
// Writes them into dir (created if needed), one file per case (precision "f64"). Returns the paths.
std::vector<std::string> write_conv_set(const ModelConfig& cfg, std::uint64_t seed, const std::string& dir);

}  // namespace replayssm::ref
