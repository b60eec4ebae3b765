// The conv component of the kernel-level lifecycle (conv_component.hpp): its setup and JSON form, the raw
// inputs of a step's tokens and the truth of a committed window.
#include "replayssm/lifecycle/conv_component.hpp"

#include <nlohmann/json.hpp>

#include "replayssm/dtype.hpp"
#include "replayssm/error.hpp"
#include "replayssm/rng.hpp"
#include "replayssm/strict_json.hpp"

namespace replayssm::ref {

void ConvSetup::validate(const ModelConfig& m, const std::string& field) const {
  cfg.validate(field);
  require(cfg.H == m.H && cfg.HV == m.HV && cfg.K == m.K && cfg.V == m.V, field + ".config",
          "heads and dims (H, HV, K, V) must be the model's");
  require(cfg.act_dtype == m.act_dtype, field + ".act_dtype", "must be the model's activation dtype");
  require(static_cast<int>(params.size()) == m.num_layers, field + ".params", "has ", params.size(),
          " layers, expected num_layers = ", m.num_layers);
  for (std::size_t l = 0; l < params.size(); ++l) params[l].validate(cfg, field + ".params[" + std::to_string(l) + "]");
}

nlohmann::json ConvSetup::to_json() const {
  return nlohmann::json{{"kernel_size", cfg.kernel_size},
                        {"activation", to_string(cfg.activation)},
                        {"bias", cfg.bias},
                        {"state_dtype", std::string(dtype_name(cfg.state_dtype))},
                        {"seed", std::to_string(seed)}};
}

ConvSetup ConvSetup::from_json(const nlohmann::json& j, const ModelConfig& m, const std::string& field) {
  require(j.is_object(), field, "must be an object");
  require_only_keys(j, {"kernel_size", "activation", "bias", "state_dtype", "seed"}, field);
  const int W = static_cast<int>(json_int(require_key(j, "kernel_size", field), field + ".kernel_size", 2, 8));
  const auto act = parse_conv_activation(json_string(require_key(j, "activation", field), field + ".activation"),
                                         field + ".activation");
  const auto& b = require_key(j, "bias", field);
  require(b.is_boolean(), field + ".bias", "is not a boolean");
  const DType sd = parse_dtype(json_string(require_key(j, "state_dtype", field), field + ".state_dtype"),
                               field + ".state_dtype");
  const std::uint64_t seed = parse_decimal_u64(json_string(require_key(j, "seed", field), field + ".seed"), field + ".seed");
  auto c = make_conv_setup(m, seed, W, sd, act, b.get<bool>());
  c.validate(m, field);
  return c;
}

ConvSetup make_conv_setup(const ModelConfig& m, std::uint64_t seed, int kernel_size, DType state_dtype,
                          ConvActivation activation, bool bias) {
  ConvSetup c;
  c.cfg = conv_config_for(m);
  c.cfg.kernel_size = kernel_size;
  c.cfg.state_dtype = state_dtype;
  c.cfg.activation = activation;
  c.cfg.bias = bias;
  c.cfg.validate("setup.conv");
  c.seed = seed;
  for (int l = 0; l < m.num_layers; ++l)
    c.params.push_back(random_conv_params(c.cfg, derive_seed(seed, 300 + static_cast<std::uint64_t>(l))));
  return c;
}

std::vector<float> conv_raw_inputs(const ModelConfig& m, const SequenceInputs& in, int t0, int n) {
  require(t0 >= 0 && n >= 0 && t0 + n <= in.T, "tokens", "[", t0, ", ", t0 + n, ") outside the ", in.T, " tokens");
  const std::size_t qk = static_cast<std::size_t>(m.H) * m.K, v = static_cast<std::size_t>(m.HV) * m.V;
  std::vector<float> x;
  x.reserve(static_cast<std::size_t>(n) * (2 * qk + v));
  for (int t = t0; t < t0 + n; ++t) {
    const auto ts = static_cast<std::size_t>(t);
    x.insert(x.end(), in.q.begin() + static_cast<std::ptrdiff_t>(ts * qk), in.q.begin() + static_cast<std::ptrdiff_t>((ts + 1) * qk));
    x.insert(x.end(), in.k.begin() + static_cast<std::ptrdiff_t>(ts * qk), in.k.begin() + static_cast<std::ptrdiff_t>((ts + 1) * qk));
    x.insert(x.end(), in.v.begin() + static_cast<std::ptrdiff_t>(ts * v), in.v.begin() + static_cast<std::ptrdiff_t>((ts + 1) * v));
  }
  return x;
}

std::vector<float> conv_window_of_history(const ConvConfig& cfg, const std::vector<float>& x, int T) {
  const std::int64_t C = cfg.channels();
  const int M = cfg.state_cols();
  require(T >= 0 && static_cast<std::int64_t>(x.size()) == T * C, "x", "has ", x.size(), " values, expected T*C = ",
          static_cast<std::int64_t>(T) * C);
  std::vector<float> s(static_cast<std::size_t>(C * M), 0.0f);
  for (int i = 0; i < M; ++i) {
    const int t = T - M + i;  // the token in column i (column M - 1 is the newest)
    if (t < 0) continue;      // before the first token: a zero column
    for (std::int64_t c = 0; c < C; ++c)
      s[static_cast<std::size_t>(c * M + i)] = round_to(cfg.state_dtype, x[static_cast<std::size_t>(t * C + c)]);
  }
  return s;
}

}  // namespace replayssm::ref
