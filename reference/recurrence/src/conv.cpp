// The short convolution and its conv state (conv.hpp): configuration, seeded inputs, the window update in
// both precisions, and the two commit designs.
#include "replayssm/recurrence/conv.hpp"

#include <algorithm>
#include <cmath>

#include "replayssm/error.hpp"
#include "replayssm/rng.hpp"

namespace replayssm::ref {

std::string to_string(ConvActivation a) { return a == ConvActivation::Silu ? "silu" : "none"; }

ConvActivation parse_conv_activation(const std::string& s, const std::string& field) {
  if (s == "silu") return ConvActivation::Silu;
  if (s == "none") return ConvActivation::None;
  fail(field, "'", s, "' is not an activation (silu, none)");
}

void ConvConfig::validate(const std::string& field) const {
  require(H >= 1 && H <= 1024, field + ".H", "is ", H, ", outside [1, 1024]");
  require(HV >= H && HV <= 4096 && HV % H == 0, field + ".HV", "is ", HV, ": must be a multiple of H = ", H,
          " in [H, 4096]");
  require(K >= 1 && K <= 1024, field + ".K", "is ", K, ", outside [1, 1024]");
  require(V >= 1 && V <= 1024, field + ".V", "is ", V, ", outside [1, 1024]");
  require(kernel_size >= 2 && kernel_size <= 8, field + ".kernel_size", "is ", kernel_size, ", outside [2, 8]");
  require(act_dtype == DType::F32 || act_dtype == DType::BF16, field + ".act_dtype", "must be F32 or BF16");
  require(state_dtype == DType::F32 || state_dtype == DType::BF16, field + ".state_dtype", "must be F32 or BF16");
}

ConvConfig conv_config_for(const ModelConfig& m) {
  ConvConfig c;
  c.name = m.name;
  c.H = m.H;
  c.HV = m.HV;
  c.K = m.K;
  c.V = m.V;
  c.act_dtype = m.act_dtype;
  c.state_dtype = m.act_dtype;
  return c;
}

nlohmann::json to_json(const ConvConfig& c) {
  return nlohmann::json{{"name", c.name},
                        {"H", c.H},
                        {"HV", c.HV},
                        {"K", c.K},
                        {"V", c.V},
                        {"channels", c.channels()},
                        {"kernel_size", c.kernel_size},
                        {"activation", to_string(c.activation)},
                        {"bias", c.bias},
                        {"act_dtype", std::string(dtype_name(c.act_dtype))},
                        {"state_dtype", std::string(dtype_name(c.state_dtype))}};
}

ConvConfig conv_config_from_json(const nlohmann::json& j, const std::string& field) {
  require(j.is_object(), field, "is not an object");
  auto key = [&](const char* k) -> const nlohmann::json& {
    require(j.contains(k), field + "." + k, "is missing");
    return j.at(k);
  };
  auto integer = [&](const char* k) {
    const auto& v = key(k);
    require(v.is_number_integer() && v.get<std::int64_t>() >= -(1LL << 31) && v.get<std::int64_t>() < (1LL << 31),
            field + "." + k, "is not a 32-bit integer");
    return static_cast<int>(v.get<std::int64_t>());
  };
  auto text = [&](const char* k) {
    const auto& v = key(k);
    require(v.is_string(), field + "." + k, "is not a string");
    return v.get<std::string>();
  };
  ConvConfig c;
  c.name = text("name");
  c.H = integer("H");
  c.HV = integer("HV");
  c.K = integer("K");
  c.V = integer("V");
  c.kernel_size = integer("kernel_size");
  c.activation = parse_conv_activation(text("activation"), field + ".activation");
  require(key("bias").is_boolean(), field + ".bias", "is not a boolean");
  c.bias = j.at("bias").get<bool>();
  c.act_dtype = parse_dtype(text("act_dtype"), field + ".act_dtype");
  c.state_dtype = parse_dtype(text("state_dtype"), field + ".state_dtype");
  c.validate(field);
  const auto& ch = key("channels");
  require(ch.is_number_integer() && ch.get<std::int64_t>() == c.channels(), field + ".channels",
          "must be 2*H*K + HV*V = ", c.channels());
  return c;
}

void ConvParams::validate(const ConvConfig& c, const std::string& prefix) const {
  require(static_cast<std::int64_t>(weight.size()) == c.channels() * c.kernel_size, prefix + ".weight", "has ",
          weight.size(), " values, expected C*W = ", c.channels() * c.kernel_size);
  const std::int64_t nb = c.bias ? c.channels() : 0;
  require(static_cast<std::int64_t>(bias.size()) == nb, prefix + ".bias", "has ", bias.size(), " values, expected ",
          nb, c.bias ? " (C)" : " (the config has no bias)");
}

ConvParams random_conv_params(const ConvConfig& c, std::uint64_t seed) {
  Rng r(seed);
  ConvParams p;
  p.weight.resize(static_cast<std::size_t>(c.channels() * c.kernel_size));
  for (auto& w : p.weight) w = round_to(c.act_dtype, 0.5f * r.normalish());
  if (c.bias) {
    p.bias.resize(static_cast<std::size_t>(c.channels()));
    for (auto& b : p.bias) b = round_to(c.act_dtype, 0.25f * r.normalish());
  }
  return p;
}

std::vector<float> random_conv_inputs(const ConvConfig& c, int T, std::uint64_t seed) {
  Rng r(seed);
  std::vector<float> x(static_cast<std::size_t>(T * c.channels()));
  for (auto& e : x) e = round_to(c.act_dtype, r.normalish());
  return x;
}

std::vector<float> random_conv_state(const ConvConfig& c, std::uint64_t seed) {
  Rng r(seed);
  std::vector<float> s(static_cast<std::size_t>(c.state_elems()));
  // A state column is an earlier token's x stored in the state dtype.
  for (auto& e : s) e = round_to(c.state_dtype, round_to(c.act_dtype, r.normalish()));
  return s;
}

namespace {

void check_window(const ConvConfig& cfg, const std::vector<float>& state, const std::vector<float>& x, int T) {
  require(T >= 1, "x", "window of ", T, " tokens: at least one is needed");
  require(static_cast<std::int64_t>(x.size()) == static_cast<std::int64_t>(T) * cfg.channels(), "x", "has ",
          x.size(), " values, expected T*C = ", static_cast<std::int64_t>(T) * cfg.channels());
  require(state.empty() || static_cast<std::int64_t>(state.size()) == cfg.state_elems(), "state", "has ",
          state.size(), " values, expected C*(W-1) = ", cfg.state_elems());
}

// Column i of E = [S | x_1 .. x_T] for channel c (i < W-1: the state, else token i - (W-1)).
float column(const ConvConfig& cfg, const std::vector<float>& state, const std::vector<float>& x, std::int64_t c,
             std::int64_t i) {
  const std::int64_t M = cfg.state_cols();
  if (i < M) return state.empty() ? 0.0f : state[static_cast<std::size_t>(c * M + i)];
  return x[static_cast<std::size_t>((i - M) * cfg.channels() + c)];
}

// The last W-1 columns of [S | x_1 .. x_t], rounded to the state dtype.
std::vector<float> state_after(const ConvConfig& cfg, const std::vector<float>& state, const std::vector<float>& x,
                               int t) {
  const std::int64_t M = cfg.state_cols(), C = cfg.channels();
  std::vector<float> s(static_cast<std::size_t>(C * M));
  for (std::int64_t c = 0; c < C; ++c)
    for (std::int64_t i = 0; i < M; ++i)
      s[static_cast<std::size_t>(c * M + i)] = round_to(cfg.state_dtype, column(cfg, state, x, c, t + i));
  return s;
}

template <class R>
R conv_output(const ConvConfig& cfg, const ConvParams& p, const std::vector<float>& state,
              const std::vector<float>& x, std::int64_t c, int t) {
  const int W = cfg.kernel_size;
  R acc = cfg.bias ? static_cast<R>(p.bias[static_cast<std::size_t>(c)]) : R(0);
  for (int j = 0; j < W; ++j)
    acc = acc + static_cast<R>(p.weight[static_cast<std::size_t>(c * W + j)]) *
                    static_cast<R>(column(cfg, state, x, c, static_cast<std::int64_t>(t) + j));
  if (cfg.activation == ConvActivation::Silu) acc = acc / (R(1) + std::exp(-acc));
  return acc;
}

}  // namespace

ConvWindowResult conv_update(const ConvConfig& cfg, const ConvParams& p, const std::vector<float>& state,
                             const std::vector<float>& x, int T, ConvPrecision prec, bool keep_states) {
  cfg.validate();
  p.validate(cfg);
  check_window(cfg, state, x, T);
  const std::int64_t C = cfg.channels();
  ConvWindowResult r;
  r.y.resize(static_cast<std::size_t>(T * C));
  for (int t = 0; t < T; ++t)
    for (std::int64_t c = 0; c < C; ++c) {
      // The truth is rounded to binary32 first, then to the activation dtype (Tensor::from_f64 does the same).
      const float v = prec == ConvPrecision::Truth ? static_cast<float>(conv_output<double>(cfg, p, state, x, c, t))
                                                   : conv_output<float>(cfg, p, state, x, c, t);
      r.y[static_cast<std::size_t>(t * C + c)] = round_to(cfg.act_dtype, v);
    }
  if (keep_states)
    for (int t = 1; t <= T; ++t) r.states.push_back(state_after(cfg, state, x, t));
  r.final_state = state_after(cfg, state, x, T);
  return r;
}

std::vector<float> conv_commit_full_state(const std::vector<float>& state,
                                          const std::vector<std::vector<float>>& states, int n) {
  require(n >= 0 && n <= static_cast<int>(states.size()), "accepted", "is ", n, ", outside [0, T=", states.size(),
          "]");
  return n == 0 ? state : states[static_cast<std::size_t>(n - 1)];
}

std::vector<float> conv_commit_replay(const ConvConfig& cfg, const std::vector<float>& state,
                                      const std::vector<float>& x, int T, int n) {
  check_window(cfg, state, x, T);
  require(!state.empty(), "state", "a commit needs the checkpoint");
  require(n >= 0 && n <= T, "accepted", "is ", n, ", outside [0, T=", T, "]");
  return n == 0 ? state : state_after(cfg, state, x, n);
}

std::vector<float> conv_sliding_state(const ConvConfig& cfg, const std::vector<float>& buffer, int L, int offset) {
  const std::int64_t C = cfg.channels(), M = cfg.state_cols();
  require(L >= M && static_cast<std::int64_t>(buffer.size()) == C * L, "buffer", "has ", buffer.size(),
          " values, expected C*L = ", C * L, " with L >= W-1");
  require(offset >= 0 && offset + M <= L, "offset", "is ", offset, ", outside [0, L-W+1 = ", L - M, "]");
  std::vector<float> s(static_cast<std::size_t>(C * M));
  for (std::int64_t c = 0; c < C; ++c)
    for (std::int64_t i = 0; i < M; ++i) s[static_cast<std::size_t>(c * M + i)] = buffer[static_cast<std::size_t>(c * L + offset + i)];
  return s;
}

std::vector<float> conv_sliding_verify(const ConvConfig& cfg, const std::vector<float>& buffer, int L, int offset,
                                       const std::vector<float>& x, int T) {
  const std::int64_t C = cfg.channels(), M = cfg.state_cols();
  require(L == M - 1 + T, "buffer", "L = ", L, " columns, a verify of T = ", T, " needs W - 2 + T = ", M - 1 + T);
  const auto state = conv_sliding_state(cfg, buffer, L, offset);
  check_window(cfg, state, x, T);
  std::vector<float> out(static_cast<std::size_t>(C * L));
  for (std::int64_t c = 0; c < C; ++c)
    for (std::int64_t i = 0; i < L; ++i)  // column i of the new buffer is column i + 1 of [state | x]
      out[static_cast<std::size_t>(c * L + i)] = round_to(cfg.state_dtype, column(cfg, state, x, c, i + 1));
  return out;
}

int conv_sliding_offset(int accepted, int T) {
  require(accepted >= 1 && accepted <= T, "accepted", "is ", accepted, ": this layout needs n in [1, T=", T, "]");
  return accepted - 1;
}

double conv_term_magnitude(const ConvConfig& cfg, const ConvParams& p, const std::vector<float>& state,
                           const std::vector<float>& x, int T) {
  check_window(cfg, state, x, T);
  const int W = cfg.kernel_size;
  double m = 0;
  for (int t = 0; t < T; ++t)
    for (std::int64_t c = 0; c < cfg.channels(); ++c) {
      double s = cfg.bias ? std::fabs(static_cast<double>(p.bias[static_cast<std::size_t>(c)])) : 0.0;
      for (int j = 0; j < W; ++j)
        s += std::fabs(static_cast<double>(p.weight[static_cast<std::size_t>(c * W + j)]) *
                       static_cast<double>(column(cfg, state, x, c, static_cast<std::int64_t>(t) + j)));
      m = std::max(m, s);
    }
  return m;
}

ConvOutputBound conv_output_bound(const ConvConfig& cfg, double term_magnitude) {
  const double u = 0x1p-24;
  ConvOutputBound b;
  b.atol = 2.0 * (cfg.kernel_size + 1) * u * std::max(1.0, term_magnitude);
  b.rtol = (cfg.activation == ConvActivation::Silu ? 0x1p-17 : 0.0) + (cfg.act_dtype == DType::BF16 ? 0x1p-7 : 0.0);
  return b;
}

}  // namespace replayssm::ref
