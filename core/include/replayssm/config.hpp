// replayssm/config.hpp — model configuration and named presets for GDN and KDA layers.
//
// Notation (see docs/math.md): H q/k heads, HV value heads (HV % H == 0, G = HV / H), K = head_k_dim,
// V = head_v_dim. Value head hv reads key head hv / G (block mapping, as in HF transformers, FLA, vLLM,
// SGLang and FlashInfer; not modulo).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "replayssm/dtype.hpp"

namespace replayssm {

// The recurrence: scalar per-head decay (Gated DeltaNet, arXiv 2412.06464) or per-key-channel decay
// (Kimi Delta Attention, arXiv 2510.26692).
enum class Op : std::uint8_t { GDN, KDA };

// Memory layout of one head's recurrent state. Never inferred from a shape: K == V hides the difference.
//   KV: S[k][v], V fastest ("K-major"; FLA and HF transformers default).
//   VK: S[v][k], K fastest ("K-last"; vLLM, SGLang, FlashInfer pretranspose, FLA state_v_first).
enum class StateLayout : std::uint8_t { KV, VK };

// L2 normalisation of q and k, s = sum(x^2). Each form is also named by its formula (l2norm_formula), which is
// how an implementation declares the one it computes (docs/target-protocol.md, "Capabilities"):
//   RsqrtMul       x * rsqrt(s + eps)        HF l2norm, vLLM / SGLang (rsqrt form)
//   DivSqrt        x / sqrt(s + eps)         FLA fused_recurrent (the same value up to the last bit)
//   DivNormPlusEps x / (sqrt(s) + eps)       eps outside the root: differs where s is near eps (|x| ~ 1e-3)
//   DivMaxNormEps  x / max(sqrt(s), eps)     torch.nn.functional.normalize
//   None           x                         no normalisation (a fixture mode; no model runs it)
enum class L2Norm : std::uint8_t { RsqrtMul, DivSqrt, None, DivNormPlusEps, DivMaxNormEps };

// KDA forget-gate forms (FLA fla/ops/kda/gate.py):
//   Softplus:          g = -exp(A_log[hv]) * softplus(a + dt_bias[hv*K + c])      (Kimi-Linear-48B)
//   LowerBoundSigmoid: g = lower_bound * sigmoid(exp(A_log[hv]) * (a + dt_bias[hv*K + c]))  ("safe gate")
enum class KdaGate : std::uint8_t { Softplus, LowerBoundSigmoid };

std::string to_string(Op);
std::string to_string(StateLayout);
std::string to_string(L2Norm);
std::string to_string(KdaGate);
Op parse_op(const std::string& s, const std::string& field = "op");
StateLayout parse_layout(const std::string& s, const std::string& field = "layout");
L2Norm parse_l2norm(const std::string& s, const std::string& field = "l2norm");
// The forms that normalise (every one but L2Norm::None): what a model runs and a campaign draws.
std::vector<L2Norm> normalising_l2norms();
// The formula of a form ("x * rsqrt(sum(x^2) + eps)", ...), and the form of a formula: spaces are ignored, the
// four formulas above and "x" are known; Error(field) lists them for any other.
std::string l2norm_formula(L2Norm n);
L2Norm parse_l2norm_formula(const std::string& s, const std::string& field = "l2norm");
KdaGate parse_kda_gate(const std::string& s, const std::string& field = "kda_gate");

struct ModelConfig {
  std::string name = "custom";
  Op op = Op::GDN;
  int H = 1, HV = 1, K = 2, V = 2;
  int num_layers = 1;                   // linear-attention layers only (full-attention layers not counted)
  L2Norm l2norm = L2Norm::RsqrtMul;
  float l2_eps = 1e-6f;                 // added to sum(x^2) inside the square root
  double q_scale = 0.0;                 // 0 means K^-1/2 (the default of every public implementation)
  bool round_beta_to_act = false;       // HF computes sigmoid(b) in the activation dtype (bf16); kernels do not
  KdaGate kda_gate = KdaGate::Softplus;
  float lower_bound = -5.0f;            // LowerBoundSigmoid only
  DType act_dtype = DType::BF16;        // q, k, v, a, b and o (F32 or BF16)
  DType state_dtype = DType::F32;       // the checkpoint / pool (F32 or BF16)
  StateLayout layout = StateLayout::VK;

  int G() const { return HV / H; }
  // Key head read by value head hv (block mapping).
  int key_head(int hv) const { return hv / (HV / H); }
  // q scale actually applied.
  double scale() const;
  // Length of the per-token gate input `a` per value head: 1 for GDN, K for KDA.
  int a_width() const { return op == Op::GDN ? 1 : K; }
  // Elements of one request's state for one layer: HV * K * V.
  std::int64_t state_elems() const { return static_cast<std::int64_t>(HV) * K * V; }

  // Throws Error naming the first invalid field (H, HV, K, V, num_layers, l2_eps, q_scale, act_dtype, ...).
  void validate() const;
};

// A configuration named `name` with the recurrence and dimensions given; every other field keeps its default.
// Not validated: call validate() where the values come from outside.
ModelConfig model_config(const std::string& name, Op op, int H, int HV, int K, int V, int num_layers = 1);

nlohmann::json to_json(const ModelConfig& c);
// Reads every field (missing fields keep their defaults), then validates. Throws Error("config.<field>").
ModelConfig config_from_json(const nlohmann::json& j);

// Named presets with real dimensions ("qwen3.5", "qwen3-next", "kimi-linear") and small ones for fast tests
// ("tiny-gdn", "tiny-kda", "small-gva3", ...). Throws Error("preset") listing the known names.
ModelConfig preset(const std::string& name);
std::vector<std::string> preset_names();

}  // namespace replayssm
