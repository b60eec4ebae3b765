// The claimed envelope of a target and the per-case draw from it (envelope.hpp).
#include "envelope.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "replayssm/error.hpp"
#include "replayssm/rng.hpp"

namespace replayssm::fuzz {

namespace {

template <class T, class Set>
std::vector<T> covered_values(const ref::Target& t, const ModelConfig& base, const std::vector<T>& all, Set set) {
  std::vector<T> out;
  for (const T& v : all) {
    ModelConfig c = base;
    set(c, v);
    if (t.unsupported(c, 1).empty()) out.push_back(v);
  }
  return out;
}

template <class T>
nlohmann::json names(const std::vector<T>& v) {
  auto a = nlohmann::json::array();
  for (const auto& x : v) {
    if constexpr (std::is_same_v<T, DType>) a.push_back(std::string(dtype_name(x)));
    else if constexpr (std::is_same_v<T, bool>) a.push_back(static_cast<bool>(x));
    else a.push_back(to_string(x));
  }
  return a;
}

template <class T>
T pick(const std::vector<T>& v, Rng& rng) {
  return v[static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(v.size()) - 1))];
}

}  // namespace

nlohmann::json Envelope::to_json() const {
  return nlohmann::json{{"act_dtypes", names(act_dtypes)},   {"state_dtypes", names(state_dtypes)},
                        {"layouts", names(layouts)},         {"l2norms", names(l2norms)},
                        {"kda_gates", names(kda_gates)},     {"round_beta_to_act", names(round_beta)},
                        {"max_T", max_T},                    {"pad_conventions", names(pad_conventions)},
                        {"copy_slot", copy},                 {"graph_padding", graph_padding},
                        {"out_of_place_commit", out_of_place}, {"capture", capture},
                        {"conv_state", conv},                {"step_mix", step_mix.to_json()},
                        {"graph_replay", graph_replay}};
}

Envelope Envelope::from_json(const nlohmann::json& j, const std::string& field) {
  Envelope e;
  auto list = [&](const char* key, auto parse) {
    const std::string f = field + "." + key;
    require(j.contains(key) && j.at(key).is_array(), f, "must be an array");
    using T = decltype(parse(nlohmann::json(), f));
    std::vector<T> out;
    for (const auto& x : j.at(key)) out.push_back(parse(x, f));
    return out;
  };
  auto str = [](const nlohmann::json& x, const std::string& f) {
    require(x.is_string(), f, "entries must be strings");
    return x.get<std::string>();
  };
  auto flag = [&](const char* key) {
    require(j.contains(key) && j.at(key).is_boolean(), field + "." + key, "must be true or false");
    return j.at(key).get<bool>();
  };
  require(j.is_object(), field, "must be an object");
  e.act_dtypes = list("act_dtypes", [&](const nlohmann::json& x, const std::string& f) { return parse_dtype(str(x, f), f); });
  e.state_dtypes = list("state_dtypes", [&](const nlohmann::json& x, const std::string& f) { return parse_dtype(str(x, f), f); });
  e.layouts = list("layouts", [&](const nlohmann::json& x, const std::string& f) { return parse_layout(str(x, f), f); });
  e.l2norms = list("l2norms", [&](const nlohmann::json& x, const std::string& f) { return parse_l2norm(str(x, f), f); });
  e.kda_gates = list("kda_gates", [&](const nlohmann::json& x, const std::string& f) { return parse_kda_gate(str(x, f), f); });
  e.round_beta = list("round_beta_to_act", [&](const nlohmann::json& x, const std::string& f) {
    require(x.is_boolean(), f, "entries must be true or false");
    return x.get<bool>();
  });
  e.pad_conventions = list("pad_conventions", [&](const nlohmann::json& x, const std::string& f) {
    return ref::parse_pad_convention(str(x, f), f);
  });
  require(j.contains("max_T") && j.at("max_T").is_number_integer(), field + ".max_T", "must be an integer");
  e.max_T = j.at("max_T").get<int>();
  e.copy = flag("copy_slot");
  e.graph_padding = flag("graph_padding");
  e.out_of_place = flag("out_of_place_commit");
  e.capture = flag("capture");
  e.conv = flag("conv_state");
  if (j.contains("graph_replay")) e.graph_replay = flag("graph_replay");  // from 1.9
  if (j.contains("step_mix")) e.step_mix = ref::StepMix::from_json(j.at("step_mix"), field + ".step_mix");  // from 1.7
  return e;
}

Envelope probe_envelope(const ref::Target& t, const ModelConfig& base, int max_T_cap) {
  Envelope e;
  if (!t.unsupported(base, 1).empty()) return e;  // max_T = 0: not covered
  e.act_dtypes = covered_values<DType>(t, base, {DType::F32, DType::BF16}, [](ModelConfig& c, DType d) { c.act_dtype = d; });
  e.state_dtypes =
      covered_values<DType>(t, base, {DType::F32, DType::BF16}, [](ModelConfig& c, DType d) { c.state_dtype = d; });
  e.layouts = covered_values<StateLayout>(t, base, {StateLayout::VK, StateLayout::KV},
                                          [](ModelConfig& c, StateLayout l) { c.layout = l; });
  e.l2norms = covered_values<L2Norm>(t, base, normalising_l2norms(), [](ModelConfig& c, L2Norm l) { c.l2norm = l; });
  if (base.op == Op::KDA)
    e.kda_gates = covered_values<KdaGate>(t, base, {KdaGate::Softplus, KdaGate::LowerBoundSigmoid},
                                          [](ModelConfig& c, KdaGate g) { c.kda_gate = g; });
  e.round_beta = covered_values<bool>(t, base, {false, true}, [](ModelConfig& c, bool b) { c.round_beta_to_act = b; });
  for (int T = 1; T <= max_T_cap; ++T)
    if (t.unsupported(base, T).empty()) e.max_T = T;
  e.pad_conventions = t.pad_conventions();
  e.copy = t.implements_copy();
  e.graph_padding = t.graph_padding();
  e.out_of_place = t.out_of_place_commit();
  e.capture = t.captures();
  e.graph_replay = t.graph_replay() && t.captures() && t.graph_padding();
  e.conv = t.conv_state();
  e.step_mix = t.step_mix();
  return e;
}

std::optional<ModelConfig> claimed_variant(const ref::Target& t, const ModelConfig& base, const Narrowing& n) {
  if (t.unsupported(base, 1).empty()) return base;
  // Each dimension's candidates: the fixed value, else base's own first, then the others.
  auto values = [](auto own, const auto& fixed, const auto& all) {
    using V = decltype(own);
    std::vector<V> v;
    if (fixed) return std::vector<V>{*fixed};
    v.push_back(own);
    for (const auto& x : all)
      if (!(x == own)) v.push_back(x);
    return v;
  };
  const auto acts = values(base.act_dtype, n.act_dtype, std::vector<DType>{DType::F32, DType::BF16});
  const auto states = values(base.state_dtype, n.state_dtype, std::vector<DType>{DType::F32, DType::BF16});
  const auto layouts = values(base.layout, n.layout, std::vector<StateLayout>{StateLayout::VK, StateLayout::KV});
  const auto l2s = values(base.l2norm, n.l2norm, normalising_l2norms());
  const auto gates = base.op == Op::KDA ? values(base.kda_gate, n.kda_gate, std::vector<KdaGate>{KdaGate::Softplus, KdaGate::LowerBoundSigmoid})
                                        : std::vector<KdaGate>{base.kda_gate};
  const auto betas = values(base.round_beta_to_act, n.round_beta, std::vector<bool>{false, true});
  for (DType a : acts)
    for (DType s : states)
      for (StateLayout l : layouts)
        for (L2Norm q : l2s)
          for (KdaGate g : gates)
            for (bool b : betas) {
              ModelConfig c = base;
              c.act_dtype = a;
              c.state_dtype = s;
              c.layout = l;
              c.l2norm = q;
              c.kda_gate = g;
              c.round_beta_to_act = b;
              if (t.unsupported(c, 1).empty()) return c;
            }
  return std::nullopt;
}

std::optional<ModelConfig> smallest_claimed(const ref::Target& t, const ModelConfig& tiny) {
  if (auto c = claimed_variant(t, tiny)) return c;
  for (int hv : {tiny.HV, tiny.H})
    for (int d : {16, 32, 64, 128, 256}) {
      ModelConfig c = tiny;
      c.HV = hv;
      c.K = c.V = d;
      if (auto v = claimed_variant(t, c)) return v;
    }
  return std::nullopt;
}

Envelope narrow(Envelope e, const Narrowing& n) {
  auto keep = [](auto& values, const auto& fixed) {
    if (!fixed) return;
    const bool in = std::find(values.begin(), values.end(), *fixed) != values.end();
    values.clear();
    if (in) values.push_back(*fixed);
  };
  keep(e.act_dtypes, n.act_dtype);
  keep(e.state_dtypes, n.state_dtype);
  keep(e.layouts, n.layout);
  keep(e.l2norms, n.l2norm);
  if (!e.kda_gates.empty()) keep(e.kda_gates, n.kda_gate);
  keep(e.round_beta, n.round_beta);
  return e;
}

CaseConfig draw_config(const Envelope& e, const ModelConfig& base, const ref::Target& t, std::uint64_t seed) {
  Rng rng(derive_seed(seed, 0xe7e1));
  CaseConfig out{base, 1};
  require(e.covered(), "target", "the target does not cover the campaign's configuration");
  out.max_T = rng.uniform_int(0, 1) == 0 ? e.max_T : static_cast<int>(rng.uniform_int(1, e.max_T));
  for (int attempt = 0; attempt < 16; ++attempt) {
    ModelConfig c = base;
    if (!e.act_dtypes.empty()) c.act_dtype = pick(e.act_dtypes, rng);
    if (!e.state_dtypes.empty()) c.state_dtype = pick(e.state_dtypes, rng);
    if (!e.layouts.empty()) c.layout = pick(e.layouts, rng);
    if (!e.l2norms.empty()) c.l2norm = pick(e.l2norms, rng);
    if (!e.kda_gates.empty()) c.kda_gate = pick(e.kda_gates, rng);
    if (!e.round_beta.empty()) c.round_beta_to_act = pick(e.round_beta, rng);
    if (t.unsupported(c, out.max_T).empty()) {
      out.cfg = c;
      return out;
    }
  }
  return out;
}

}  // namespace replayssm::fuzz
