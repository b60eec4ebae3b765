#include "replayssm/config.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <nlohmann/json.hpp>

#include "replayssm/error.hpp"

namespace replayssm {

std::string to_string(Op o) { return o == Op::GDN ? "gdn" : "kda"; }
std::string to_string(StateLayout l) { return l == StateLayout::KV ? "kv" : "vk"; }
std::string to_string(L2Norm n) {
  switch (n) {
    case L2Norm::RsqrtMul: return "rsqrt_mul";
    case L2Norm::DivSqrt: return "div_sqrt";
    case L2Norm::None: return "none";
    case L2Norm::DivNormPlusEps: return "div_norm_plus_eps";
    case L2Norm::DivMaxNormEps: return "div_max_norm_eps";
  }
  return "none";
}
std::string to_string(KdaGate g) { return g == KdaGate::Softplus ? "softplus" : "lower_bound_sigmoid"; }

Op parse_op(const std::string& s, const std::string& field) {
  if (s == "gdn") return Op::GDN;
  if (s == "kda") return Op::KDA;
  fail(field, "unknown op '", s, "' (expected gdn or kda)");
}
StateLayout parse_layout(const std::string& s, const std::string& field) {
  if (s == "kv") return StateLayout::KV;
  if (s == "vk") return StateLayout::VK;
  fail(field, "unknown state layout '", s, "' (expected kv or vk)");
}
std::vector<L2Norm> normalising_l2norms() {
  return {L2Norm::RsqrtMul, L2Norm::DivSqrt, L2Norm::DivNormPlusEps, L2Norm::DivMaxNormEps};
}

std::string l2norm_formula(L2Norm n) {
  switch (n) {
    case L2Norm::RsqrtMul: return "x * rsqrt(sum(x^2) + eps)";
    case L2Norm::DivSqrt: return "x / sqrt(sum(x^2) + eps)";
    case L2Norm::DivNormPlusEps: return "x / (sqrt(sum(x^2)) + eps)";
    case L2Norm::DivMaxNormEps: return "x / max(sqrt(sum(x^2)), eps)";
    case L2Norm::None: return "x";
  }
  return "?";
}

L2Norm parse_l2norm_formula(const std::string& s, const std::string& field) {
  auto squeeze = [](const std::string& t) {
    std::string o;
    for (char ch : t)
      if (ch != ' ' && ch != '\t') o += ch;
    return o;
  };
  const std::string want = squeeze(s);
  std::string known;
  for (L2Norm n : {L2Norm::RsqrtMul, L2Norm::DivSqrt, L2Norm::DivNormPlusEps, L2Norm::DivMaxNormEps, L2Norm::None}) {
    if (squeeze(l2norm_formula(n)) == want) return n;
    known += (known.empty() ? "" : "; ") + l2norm_formula(n);
  }
  fail(field, "unknown l2norm formula '", s, "' (known: ", known, ")");
}

L2Norm parse_l2norm(const std::string& s, const std::string& field) {
  if (s == "rsqrt_mul") return L2Norm::RsqrtMul;
  if (s == "div_sqrt") return L2Norm::DivSqrt;
  if (s == "none") return L2Norm::None;
  if (s == "div_norm_plus_eps") return L2Norm::DivNormPlusEps;
  if (s == "div_max_norm_eps") return L2Norm::DivMaxNormEps;
  fail(field, "unknown l2norm form '", s, "' (expected rsqrt_mul, div_sqrt, div_norm_plus_eps, div_max_norm_eps or none)");
}
KdaGate parse_kda_gate(const std::string& s, const std::string& field) {
  if (s == "softplus") return KdaGate::Softplus;
  if (s == "lower_bound_sigmoid") return KdaGate::LowerBoundSigmoid;
  fail(field, "unknown KDA gate '", s, "' (expected softplus or lower_bound_sigmoid)");
}

double ModelConfig::scale() const { return q_scale != 0.0 ? q_scale : 1.0 / std::sqrt(static_cast<double>(K)); }

void ModelConfig::validate() const {
  require(H >= 1, "H", "must be >= 1, got ", H);
  require(HV >= 1, "HV", "must be >= 1, got ", HV);
  require(HV % H == 0, "HV", "must be a multiple of H (GVA), got HV=", HV, " H=", H);
  require(K >= 1 && K <= 1024, "K", "must be in [1, 1024], got ", K);
  require(V >= 1 && V <= 1024, "V", "must be in [1, 1024], got ", V);
  require(num_layers >= 1, "num_layers", "must be >= 1, got ", num_layers);
  require(std::isfinite(l2_eps) && l2_eps >= 0, "l2_eps", "must be finite and >= 0");
  require(std::isfinite(q_scale) && q_scale >= 0, "q_scale", "must be finite and >= 0 (0 = K^-1/2)");
  require(std::isfinite(lower_bound) && lower_bound < 0, "lower_bound", "must be finite and < 0");
  require(act_dtype == DType::F32 || act_dtype == DType::BF16, "act_dtype", "must be F32 or BF16, got ",
          std::string(dtype_name(act_dtype)));
  require(state_dtype == DType::F32 || state_dtype == DType::BF16, "state_dtype", "must be F32 or BF16, got ",
          std::string(dtype_name(state_dtype)));
}

nlohmann::json to_json(const ModelConfig& c) {
  return nlohmann::json{{"name", c.name},
                        {"op", to_string(c.op)},
                        {"H", c.H},
                        {"HV", c.HV},
                        {"K", c.K},
                        {"V", c.V},
                        {"num_layers", c.num_layers},
                        {"l2norm", to_string(c.l2norm)},
                        {"l2_eps", c.l2_eps},
                        {"q_scale", c.q_scale},
                        {"round_beta_to_act", c.round_beta_to_act},
                        {"kda_gate", to_string(c.kda_gate)},
                        {"lower_bound", c.lower_bound},
                        {"act_dtype", std::string(dtype_name(c.act_dtype))},
                        {"state_dtype", std::string(dtype_name(c.state_dtype))},
                        {"layout", to_string(c.layout)}};
}

ModelConfig config_from_json(const nlohmann::json& j) {
  require(j.is_object(), "config", "must be a JSON object");
  ModelConfig c;
  static const char* const kKeys[] = {"name", "op", "H", "HV", "K", "V", "num_layers", "l2norm", "l2_eps", "q_scale",
                                      "round_beta_to_act", "kda_gate", "lower_bound", "act_dtype", "state_dtype",
                                      "layout"};
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const char* k : kKeys) known = known || key == k;
    require(known, "config." + key, "unknown configuration key");
  }
  auto get = [&](const char* key, auto& dst) {
    if (!j.contains(key)) return;
    const auto& v = j.at(key);
    using T = std::decay_t<decltype(dst)>;
    const std::string field = std::string("config.") + key;
    // No silent conversions: integers must be JSON integers in range, booleans booleans, numbers numbers.
    if constexpr (std::is_same_v<T, int>) {
      require(v.is_number_integer(), field, "must be an integer, got ", v.dump());
      const auto x = v.get<std::int64_t>();
      require(x >= std::numeric_limits<int>::min() && x <= std::numeric_limits<int>::max(), field, "is out of range");
      dst = static_cast<int>(x);
    } else if constexpr (std::is_same_v<T, bool>) {
      require(v.is_boolean(), field, "must be true or false, got ", v.dump());
      dst = v.get<bool>();
    } else if constexpr (std::is_floating_point_v<T>) {
      require(v.is_number(), field, "must be a number, got ", v.dump());
      dst = v.get<T>();
    } else {
      require(v.is_string(), field, "must be a string, got ", v.dump());
      dst = v.get<std::string>();
    }
  };
  std::string s;
  get("name", c.name);
  if (j.contains("op")) { get("op", s); c.op = parse_op(s, "config.op"); }
  get("H", c.H);
  get("HV", c.HV);
  get("K", c.K);
  get("V", c.V);
  get("num_layers", c.num_layers);
  if (j.contains("l2norm")) { get("l2norm", s); c.l2norm = parse_l2norm(s, "config.l2norm"); }
  get("l2_eps", c.l2_eps);
  get("q_scale", c.q_scale);
  get("round_beta_to_act", c.round_beta_to_act);
  if (j.contains("kda_gate")) { get("kda_gate", s); c.kda_gate = parse_kda_gate(s, "config.kda_gate"); }
  get("lower_bound", c.lower_bound);
  if (j.contains("act_dtype")) { get("act_dtype", s); c.act_dtype = parse_dtype(s, "config.act_dtype"); }
  if (j.contains("state_dtype")) { get("state_dtype", s); c.state_dtype = parse_dtype(s, "config.state_dtype"); }
  if (j.contains("layout")) { get("layout", s); c.layout = parse_layout(s, "config.layout"); }
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error("config." + e.field(), std::string(e.what()).substr(e.field().size() + 2));
  }
  return c;
}

ModelConfig model_config(const std::string& name, Op op, int H, int HV, int K, int V, int num_layers) {
  return ModelConfig{.name = name, .op = op, .H = H, .HV = HV, .K = K, .V = V, .num_layers = num_layers};
}

std::vector<std::string> preset_names() {
  return {"qwen3.5", "qwen3-next", "kimi-linear", "tiny-gdn", "tiny-kda", "small-gva3", "small-kv-neq", "small-gva8"};
}

ModelConfig preset(const std::string& name) {
  // Real dimensions: Qwen3.5 (HF configuration_qwen3_5.py: linear H=16, HV=32, K=V=128, 24 of 32 layers GDN),
  // Qwen3-Next-80B-A3B (36 of 48 layers GDN), Kimi-Linear-48B-A3B (20 KDA layers, 32 heads of 128, softplus gate).
  if (name == "qwen3.5") return model_config("qwen3.5", Op::GDN, 16, 32, 128, 128, 24);
  if (name == "qwen3-next") return model_config("qwen3-next", Op::GDN, 16, 32, 128, 128, 36);
  if (name == "kimi-linear") return model_config("kimi-linear", Op::KDA, 32, 32, 128, 128, 20);
  // Small presets for fast tests: same code paths, hand-sized dimensions.
  if (name == "tiny-gdn") return model_config("tiny-gdn", Op::GDN, 2, 4, 8, 8, 2);
  if (name == "tiny-kda") return model_config("tiny-kda", Op::KDA, 2, 2, 8, 8, 2);
  if (name == "small-gva3") return model_config("small-gva3", Op::GDN, 2, 6, 16, 16, 2);
  if (name == "small-kv-neq") return model_config("small-kv-neq", Op::GDN, 2, 4, 16, 24, 2);
  if (name == "small-gva8") return model_config("small-gva8", Op::GDN, 1, 8, 8, 12, 3);
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  fail("preset", "unknown preset '", name, "' (known: ", known, ")");
}

}  // namespace replayssm
