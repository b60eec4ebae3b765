// conv.* fixtures (conv_fixture.hpp): the short convolution's window update, prefill and commit, generated
// and re-checked by one function (run_conv_op) so generation and `replayssm check` cannot drift apart.
#include "replayssm/reference/conv_fixture.hpp"

#include <filesystem>

#include "replayssm/error.hpp"
#include "replayssm/reference/conv.hpp"
#include "replayssm/rng.hpp"

namespace replayssm::ref {

bool is_conv_op(const std::string& op) { return op == kConvPrefillOp || op == kConvUpdateOp || op == kConvCommitOp; }

namespace {

const Tensor& need(const std::map<std::string, Tensor>& t, const std::string& name, DType d, const Shape& s) {
  const auto it = t.find(name);
  require(it != t.end(), name, "tensor is missing");
  it->second.expect(d, s, name);
  return it->second;
}

ConvConfig config_of(const nlohmann::json& config) {
  require(config.is_object() && config.contains("conv"), "config.conv", "is missing");
  return conv_config_from_json(config.at("conv"), "config.conv");
}

ConvParams params_of(const ConvConfig& c, const std::map<std::string, Tensor>& t) {
  const std::int64_t C = c.channels();
  ConvParams p;
  p.weight = need(t, "param.weight", c.act_dtype, {C, c.kernel_size}).to_f32();
  if (c.bias) {
    p.bias = need(t, "param.bias", c.act_dtype, {C}).to_f32();
  } else {
    require(!t.count("param.bias"), "param.bias", "is present but config.conv.bias is false");
  }
  return p;
}

// The window x [T, C]: T from the tensor itself, at least one token.
std::pair<std::vector<float>, int> window_of(const ConvConfig& c, const std::map<std::string, Tensor>& t) {
  const auto it = t.find("in.x");
  require(it != t.end(), "in.x", "tensor is missing");
  require(it->second.shape.size() == 2 && it->second.shape[0] >= 1 && it->second.shape[0] <= 1 << 20, "in.x",
          "shape ", shape_str(it->second.shape), " is not [T, C] with T in [1, 2^20]");
  const std::int64_t T = it->second.shape[0];
  return {need(t, "in.x", c.act_dtype, {T, c.channels()}).to_f32(), static_cast<int>(T)};
}

}  // namespace

std::map<std::string, Tensor> run_conv_op(const std::string& op, const nlohmann::json& config,
                                          const std::map<std::string, Tensor>& t) {
  require(is_conv_op(op), "op", "'", op, "' is not a conv op (conv.prefill, conv.update, conv.commit)");
  const ConvConfig c = config_of(config);
  const std::int64_t C = c.channels(), M = c.state_cols();
  const auto state = need(t, "in.state", c.state_dtype, {C, M}).to_f32();
  const auto [x, T] = window_of(c, t);
  std::map<std::string, Tensor> out;
  if (op == kConvCommitOp) {
    const std::int64_t n = need(t, "in.accepted", DType::I32, {}).to_i64()[0];
    require(n >= 0 && n <= T, "in.accepted", "is ", n, ", outside [0, T=", T, "]");
    out["out.state"] = Tensor::from_f32(c.state_dtype, {C, M}, conv_commit_replay(c, state, x, T, static_cast<int>(n)));
    return out;
  }
  const ConvParams p = params_of(c, t);
  const bool update = op == kConvUpdateOp;
  auto r = conv_update(c, p, state, x, T, ConvPrecision::Truth, update);
  out["out.y"] = Tensor::from_f32(c.act_dtype, {T, C}, r.y);
  if (update) {
    std::vector<float> all;
    for (const auto& s : r.states) all.insert(all.end(), s.begin(), s.end());
    out["out.states"] = Tensor::from_f32(c.state_dtype, {T, C, M}, all);
  } else {
    out["out.state"] = Tensor::from_f32(c.state_dtype, {C, M}, r.final_state);
  }
  return out;
}

std::vector<GoldenCase> conv_cases(const ModelConfig& cfg, std::uint64_t seed) {
  cfg.validate();
  struct Plan {
    const char* tag;
    const char* op;
    int T, n;          // n: accepted (commit only)
    int W;             // kernel size
    bool fresh;        // zero state (a prompt's first chunk)
    bool bias;
    bool silu;
    DType act, state;  // act: the model's for "model"
  };
  const DType A = cfg.act_dtype, F = DType::F32, B = DType::BF16;
  std::vector<Plan> plans{
      {"prefill_fresh_T9", kConvPrefillOp, 9, 0, 4, true, false, true, A, A},
      {"prefill_chunk_T2_bias_noact_f32state", kConvPrefillOp, 2, 0, 4, false, true, false, A, F},
      {"update_T4", kConvUpdateOp, 4, 0, 4, false, false, true, A, A},
      {"update_T1_bias_f32act_bf16state", kConvUpdateOp, 1, 0, 4, false, true, true, F, B},
      {"update_T3_k2_bias", kConvUpdateOp, 3, 0, 2, false, true, true, A, A},
      {"commit_T4_n0", kConvCommitOp, 4, 0, 4, false, false, true, A, A},
      {"commit_T4_n2", kConvCommitOp, 4, 2, 4, false, false, true, A, A},
      {"commit_T4_n4", kConvCommitOp, 4, 4, 4, false, false, true, A, A},
      {"commit_T5_n3_k6_f32act_bf16state", kConvCommitOp, 5, 3, 6, false, false, true, F, B},
  };
  if (conv_config_for(cfg).channels() > 1024)
    plans = {{"update_T2", kConvUpdateOp, 2, 0, 4, false, false, true, A, A},
             {"commit_T2_n1", kConvCommitOp, 2, 1, 4, false, false, true, A, A}};
  std::vector<GoldenCase> cases;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const Plan& pl = plans[i];
    ConvConfig c = conv_config_for(cfg);
    c.kernel_size = pl.W;
    c.bias = pl.bias;
    c.activation = pl.silu ? ConvActivation::Silu : ConvActivation::None;
    c.act_dtype = pl.act;
    c.state_dtype = pl.state;
    GoldenCase g;
    g.op = pl.op;
    g.seed = derive_seed(seed, 400 + i);
    g.name = cfg.name + "__conv__" + pl.tag;
    g.config = nlohmann::json{{"conv", to_json(c)}, {"args", {{"case", pl.tag}}}};
    const std::int64_t C = c.channels(), M = c.state_cols();
    const auto state = pl.fresh ? std::vector<float>(static_cast<std::size_t>(C * M), 0.0f)
                                : random_conv_state(c, derive_seed(g.seed, 1));
    const auto x = random_conv_inputs(c, pl.T, derive_seed(g.seed, 2));
    auto& t = g.tensors;
    t["in.state"] = Tensor::from_f32(c.state_dtype, {C, M}, state);
    t["in.x"] = Tensor::from_f32(c.act_dtype, {pl.T, C}, x);
    const ConvParams p = random_conv_params(c, derive_seed(g.seed, 3));
    if (std::string(pl.op) == kConvCommitOp) {
      t["in.accepted"] = Tensor::from_i32({}, {pl.n});
    } else {
      t["param.weight"] = Tensor::from_f32(c.act_dtype, {C, c.kernel_size}, p.weight);
      if (c.bias) t["param.bias"] = Tensor::from_f32(c.act_dtype, {C}, p.bias);
    }
    for (auto& [name, v] : run_conv_op(g.op, g.config, t)) {
      if (name == "out.y") {
        const auto b = conv_output_bound(c, conv_term_magnitude(c, p, state, x, pl.T));
        g.tolerance[name] = Tolerance::allclose(b.atol, b.rtol);
      } else {
        g.tolerance[name] = Tolerance::exact();
      }
      t[name] = std::move(v);
    }
    cases.push_back(std::move(g));
  }
  return cases;
}

std::vector<std::string> write_conv_set(const ModelConfig& cfg, std::uint64_t seed, const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::vector<std::string> paths;
  for (const auto& g : conv_cases(cfg, seed)) {
    const auto path = (std::filesystem::path(dir) / (g.name + ".safetensors")).string();
    save_fixture(path, to_fixture(g));
    paths.push_back(path);
  }
  return paths;
}

}  // namespace replayssm::ref
