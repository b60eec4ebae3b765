// Capabilities of an implementation (capabilities.hpp): the hello answer's object read strictly, its JSON form,
// and what a configuration or fixture needs of it.
#include "capabilities.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "replayssm/error.hpp"

namespace replayssm::exec {

using nlohmann::json;

namespace {

template <class T, class Parse>
std::vector<T> list_of(const json& j, const char* key, std::vector<T> def, Parse&& parse) {
  if (!j.contains(key)) return def;
  const std::string f = std::string("target.hello.capabilities.") + key;
  require(j.at(key).is_array(), f, "must be an array");
  std::vector<T> out;
  for (const auto& e : j.at(key)) out.push_back(parse(e, f));
  return out;
}
std::string str_of(const json& e, const std::string& f) {
  require(e.is_string(), f, "entries must be strings");
  return e.get<std::string>();
}
int int_of(const json& e, const std::string& f) {
  require(e.is_number_integer(), f, "must be integers");
  return e.get<int>();
}
bool bool_of(const json& j, const char* key, bool def) {
  if (!j.contains(key)) return def;
  require(j.at(key).is_boolean(), std::string("target.hello.capabilities.") + key, "must be true or false");
  return j.at(key).get<bool>();
}
template <class T>
bool has(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

Capabilities Capabilities::from_json(const json& j) {
  require(j.is_object(), "target.hello.capabilities", "must be an object");
  Capabilities c;
  const std::string p = "target.hello.capabilities.";
  if (j.contains("name")) c.name = str_of(j.at("name"), p + "name");
  c.ops = list_of<Op>(j, "ops", c.ops, [](const json& e, const std::string& f) { return parse_op(str_of(e, f), f); });
  c.act_dtypes = list_of<DType>(j, "act_dtypes", c.act_dtypes,
                                [](const json& e, const std::string& f) { return parse_dtype(str_of(e, f), f); });
  c.state_dtypes = list_of<DType>(j, "state_dtypes", c.state_dtypes,
                                  [](const json& e, const std::string& f) { return parse_dtype(str_of(e, f), f); });
  c.layouts = list_of<StateLayout>(j, "layouts", c.layouts,
                                   [](const json& e, const std::string& f) { return parse_layout(str_of(e, f), f); });
  // A form by its name ("rsqrt_mul") or by its formula ("x / (sqrt(sum(x^2)) + eps)": where eps sits).
  c.l2norms = list_of<L2Norm>(j, "l2norms", c.l2norms, [](const json& e, const std::string& f) {
    const std::string s = str_of(e, f);
    return s.find('(') == std::string::npos && s != "x" ? parse_l2norm(s, f) : parse_l2norm_formula(s, f);
  });
  c.kda_gates = list_of<KdaGate>(j, "kda_gates", c.kda_gates,
                                 [](const json& e, const std::string& f) { return parse_kda_gate(str_of(e, f), f); });
  c.gva_ratios = list_of<int>(j, "gva_ratios", {}, int_of);
  c.K = list_of<int>(j, "K", {}, int_of);
  c.V = list_of<int>(j, "V", {}, int_of);
  c.fixture_ops = list_of<std::string>(j, "fixture_ops", {}, [](const json& e, const std::string& f) {
    const std::string op = str_of(e, f);
    std::string known;
    for (const auto& k : kFixtureOps) known += (known.empty() ? "" : ", ") + k;
    require(has(kFixtureOps, op), f, "'", op, "' is not a fixture op (known: ", known, ")");
    return op;
  });
  for (std::size_t i = 0; i < c.fixture_ops.size(); ++i)
    for (std::size_t k = 0; k < i; ++k)
      require(c.fixture_ops[k] != c.fixture_ops[i], p + "fixture_ops", "lists '", c.fixture_ops[i], "' twice");
  c.pad_conventions = list_of<ref::PadConvention>(j, "pad_conventions", c.pad_conventions,
                                                  [](const json& e, const std::string& f) {
                                                    return ref::parse_pad_convention(str_of(e, f), f);
                                                  });
  require(!c.pad_conventions.empty(), p + "pad_conventions", "must name at least one convention");
  c.graph_padding = bool_of(j, "graph_padding", c.graph_padding);
  c.out_of_place_commit = bool_of(j, "out_of_place_commit", c.out_of_place_commit);
  c.capture = bool_of(j, "capture", c.capture);
  c.graph_replay = bool_of(j, "graph_replay", c.graph_replay);
  require(!c.graph_replay || (c.capture && c.graph_padding), p + "graph_replay",
          "is claimed without ", c.capture ? "graph_padding" : "capture",
          ": a replayed bucket is one the implementation captured, run as a captured batch with a graph tail");
  if (j.contains("mrope")) {
    const json& m = j.at("mrope");
    const std::string f = p + "mrope";
    require(m.is_object(), f, "must be an object like {\"models\": [\"qwen3.5\"], \"pad_positions\": \"zero\"}");
    for (auto it = m.begin(); it != m.end(); ++it)
      require(it.key() == "models" || it.key() == "pad_positions", f + "." + it.key(),
              "unknown key (allowed: models, pad_positions)");
    require(m.contains("models") && m.at("models").is_array() && !m.at("models").empty(), f + ".models",
            "must be a non-empty array of MRoPE presets");
    const std::vector<std::string> known{"qwen2-vl", "qwen2.5-vl", "qwen3-vl", "qwen3.5"};
    for (const auto& e : m.at("models")) {
      const std::string name = str_of(e, f + ".models");
      require(has(known, name), f + ".models", "'", name, "' is not an MRoPE preset (known: qwen2-vl, qwen2.5-vl, qwen3-vl, qwen3.5)");
      require(!has(c.mrope_models, name), f + ".models", "lists '", name, "' twice");
      c.mrope_models.push_back(name);
    }
    if (m.contains("pad_positions")) {
      const std::string v = str_of(m.at("pad_positions"), f + ".pad_positions");
      require(v == "zero" || v == "any", f + ".pad_positions", "must be zero or any, got '", v, "'");
      c.mrope_pad_zero = v == "zero";
    }
  }
  c.conv_state = bool_of(j, "conv_state", c.conv_state);
  if (j.contains("step_mix")) c.step_mix = ref::StepMix::from_json(j.at("step_mix"), p + "step_mix");
  if (j.contains("self_check")) c.self_check = ref::SelfClaim::from_json(j.at("self_check"), p + "self_check");
  c.round_beta_to_act = bool_of(j, "round_beta_to_act", c.round_beta_to_act);
  c.copy_slot = bool_of(j, "copy_slot", c.copy_slot);
  c.bit_exact = bool_of(j, "bit_exact", c.bit_exact);
  c.pad_outputs_zero = bool_of(j, "pad_outputs_zero", c.pad_outputs_zero);
  if (j.contains("max_T")) c.max_T = int_of(j.at("max_T"), p + "max_T");
  if (j.contains("max_layers")) c.max_layers = int_of(j.at("max_layers"), p + "max_layers");
  require(c.max_T >= 1, p + "max_T", "must be >= 1, got ", c.max_T);
  require(c.max_layers >= 1, p + "max_layers", "must be >= 1, got ", c.max_layers);
  if (j.contains("tier")) c.tier = parse_tier(str_of(j.at("tier"), p + "tier"), p + "tier");
  if (j.contains("design")) c.design = str_of(j.at("design"), p + "design");
  return c;
}

json Capabilities::to_json() const {
  auto names = [](const auto& v) {
    json a = json::array();
    for (const auto& x : v) {
      if constexpr (std::is_same_v<std::decay_t<decltype(x)>, DType>)
        a.push_back(std::string(dtype_name(x)));
      else
        a.push_back(to_string(x));
    }
    return a;
  };
  json j{{"name", name},         {"ops", names(ops)},
              {"act_dtypes", names(act_dtypes)}, {"state_dtypes", names(state_dtypes)},
              {"layouts", names(layouts)},       {"l2norms", names(l2norms)},
              {"kda_gates", names(kda_gates)},   {"round_beta_to_act", round_beta_to_act},
              {"gva_ratios", gva_ratios},        {"K", K},
              {"V", V},                          {"max_T", max_T},
              {"max_layers", max_layers},        {"copy_slot", copy_slot},
              {"bit_exact", bit_exact},          {"tier", to_string(tier)},
              {"pad_outputs_zero", pad_outputs_zero}, {"design", design},
              {"fixture_ops", fixture_ops},      {"pad_conventions", names(pad_conventions)},
              {"graph_padding", graph_padding},  {"out_of_place_commit", out_of_place_commit},
              {"capture", capture},              {"conv_state", conv_state},
              {"step_mix", step_mix.to_json()},  {"self_check", self_check.to_json()},
              {"graph_replay", graph_replay}};
  if (!mrope_models.empty())  // absent when not claimed, as in a hello answer
    j["mrope"] = json{{"models", mrope_models}, {"pad_positions", mrope_pad_zero ? "zero" : "any"}};
  return j;
}

std::string Capabilities::unsupported(const ModelConfig& cfg, int max_T_wanted) const {
  std::ostringstream why;
  if (!has(ops, cfg.op)) why << "op " << to_string(cfg.op) << "; ";
  if (!has(act_dtypes, cfg.act_dtype)) why << "act_dtype " << dtype_name(cfg.act_dtype) << "; ";
  if (!has(state_dtypes, cfg.state_dtype)) why << "state_dtype " << dtype_name(cfg.state_dtype) << "; ";
  if (!has(layouts, cfg.layout)) why << "layout " << to_string(cfg.layout) << "; ";
  if (!has(l2norms, cfg.l2norm)) why << "l2norm " << to_string(cfg.l2norm) << "; ";
  if (cfg.op == Op::KDA && !has(kda_gates, cfg.kda_gate)) why << "kda_gate " << to_string(cfg.kda_gate) << "; ";
  if (cfg.round_beta_to_act && !round_beta_to_act) why << "round_beta_to_act; ";
  if (!gva_ratios.empty() && !has(gva_ratios, cfg.G())) why << "GVA ratio " << cfg.G() << "; ";
  if (!K.empty() && !has(K, cfg.K)) why << "K = " << cfg.K << "; ";
  if (!V.empty() && !has(V, cfg.V)) why << "V = " << cfg.V << "; ";
  if (max_T_wanted > max_T) why << "max_T = " << max_T_wanted << " (the target takes up to " << max_T << "); ";
  if (cfg.num_layers > max_layers) why << "num_layers = " << cfg.num_layers << "; ";
  std::string s = why.str();
  if (!s.empty()) s = "not supported by the target: " + s.substr(0, s.size() - 2);
  return s;
}

std::string Capabilities::unsupported_conv(DType act_dtype, DType state_dtype, int window) const {
  std::ostringstream why;
  if (!has(act_dtypes, act_dtype)) why << "act_dtype " << dtype_name(act_dtype) << "; ";
  if (!has(state_dtypes, state_dtype)) why << "state_dtype " << dtype_name(state_dtype) << "; ";
  if (window > max_T) why << "max_T = " << window << " (the target takes up to " << max_T << "); ";
  std::string s = why.str();
  if (!s.empty()) s = "not supported by the target: " + s.substr(0, s.size() - 2);
  return s;
}

int fixture_op_minor(const std::string& op) {
  return op.rfind("conv.", 0) == 0    ? 3
         : op == "mrope.rotary"         ? kMropeMinor
         : op.rfind("tree.", 0) == 0    ? kTreeFixtureMinor
                                        : 1;
}

std::string protocol_gap(int minor, const std::string& op) {
  const std::string speaks = "the target speaks protocol 1." + std::to_string(minor);
  if (minor < 1) return speaks + ", which has no fixture command";
  return speaks + ", which has no fixture op '" + op + "' (added in 1." + std::to_string(fixture_op_minor(op)) + ")";
}

bool Capabilities::runs_fixture_op(const std::string& op) const {
  return protocol_minor >= fixture_op_minor(op) && has(fixture_ops, op);
}

}  // namespace replayssm::exec
