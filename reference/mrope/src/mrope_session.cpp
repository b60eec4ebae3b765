// MRoPE sessions (mrope_session.hpp): rows and commands, their JSON (the protocol 1.10 messages), the preset as
// mrope_setup sends it, cases and the inputs of their steps.
#include "replayssm/mrope/mrope_session.hpp"

#include <set>
#include <sstream>

#include "replayssm/error.hpp"
#include "replayssm/mrope/mrope_json.hpp"
#include "replayssm/rng.hpp"

namespace replayssm::mrope {

namespace {

using ojson = nlohmann::ordered_json;

void only_keys(const nlohmann::json& j, const std::set<std::string>& allowed, const std::string& field) {
  require(j.is_object(), field, "must be an object");
  for (auto it = j.begin(); it != j.end(); ++it)
    require(allowed.count(it.key()) > 0, field + "." + it.key(), "unknown key");
}

std::int64_t int_at(const nlohmann::json& j, const char* key, const std::string& field) {
  const std::string f = field + "." + key;
  require(j.contains(key), f, "is missing");
  require(j.at(key).is_number_integer(), f, "must be an integer, got ", j.at(key).dump());
  return j.at(key).get<std::int64_t>();
}

VideoRule parse_video_rule(const std::string& s, const std::string& field) {
  for (VideoRule r : {VideoRule::FrameIndex, VideoRule::ScaledTime, VideoRule::PerFrame})
    if (to_string(r) == s) return r;
  fail(field, "must be frame-index, scaled-time or per-frame, got '", s, "'");
}

}  // namespace

std::string to_string(RowKind k) {
  switch (k) {
    case RowKind::Prefill: return "prefill";
    case RowKind::Verify: return "verify";
    case RowKind::Decode: return "decode";
    case RowKind::Pad: return "pad";
  }
  return "?";
}

RowKind parse_row_kind(const std::string& s, const std::string& field) {
  for (RowKind k : {RowKind::Prefill, RowKind::Verify, RowKind::Decode, RowKind::Pad})
    if (to_string(k) == s) return k;
  fail(field, "must be prefill, verify, decode or pad, got '", s, "'");
}

std::int64_t SessionCommand::tokens() const {
  std::int64_t n = 0;
  for (const auto& r : rows) n += r.tokens;
  return n;
}

ojson SessionCommand::to_json() const {
  switch (op) {
    case Op::Admit: {
      ojson j{{"op", "mrope_admit"}, {"req", req}, {"segments", request_to_json(Request{segments})["segments"]}};
      if (cached > 0) j["cached"] = cached;
      return j;
    }
    case Op::Release: return ojson{{"op", "mrope_release"}, {"req", req}};
    case Op::Accept: {
      ojson rs = ojson::array();
      for (const auto& [r, n] : accepted) rs.push_back(ojson{{"req", r}, {"accepted", n}});
      return ojson{{"op", "mrope_accept"}, {"rows", rs}};
    }
    case Op::Step: {
      ojson rs = ojson::array();
      for (const auto& r : rows) {
        ojson e;
        if (r.kind != RowKind::Pad) e["req"] = r.req;
        e["kind"] = to_string(r.kind);
        e["tokens"] = r.tokens;
        rs.push_back(e);
      }
      return ojson{{"op", "mrope_step"}, {"tokens", tokens()}, {"rows", rs}};
    }
  }
  return {};
}

SessionCommand SessionCommand::from_json(const nlohmann::json& j, const std::string& field) {
  require(j.is_object() && j.contains("op") && j.at("op").is_string(), field + ".op", "is missing or not a string");
  const std::string op = j.at("op").get<std::string>();
  SessionCommand c;
  if (op == "mrope_admit") {
    only_keys(j, {"op", "req", "segments", "cached"}, field);
    c.op = Op::Admit;
    c.req = int_at(j, "req", field);
    if (j.contains("cached")) c.cached = int_at(j, "cached", field);
    require(j.contains("segments"), field + ".segments", "is missing");
    c.segments = segments_from_json(j.at("segments"), field + ".segments");
  } else if (op == "mrope_release") {
    only_keys(j, {"op", "req"}, field);
    c.op = Op::Release;
    c.req = int_at(j, "req", field);
  } else if (op == "mrope_accept") {
    only_keys(j, {"op", "rows"}, field);
    c.op = Op::Accept;
    require(j.contains("rows") && j.at("rows").is_array(), field + ".rows", "must be an array");
    for (std::size_t i = 0; i < j.at("rows").size(); ++i) {
      const std::string f = field + ".rows[" + std::to_string(i) + "]";
      only_keys(j.at("rows")[i], {"req", "accepted"}, f);
      c.accepted.emplace_back(int_at(j.at("rows")[i], "req", f), int_at(j.at("rows")[i], "accepted", f));
    }
  } else if (op == "mrope_step") {
    only_keys(j, {"op", "rows", "tokens"}, field);
    c.op = Op::Step;
    require(j.contains("rows") && j.at("rows").is_array(), field + ".rows", "must be an array");
    for (std::size_t i = 0; i < j.at("rows").size(); ++i) {
      const std::string f = field + ".rows[" + std::to_string(i) + "]";
      const auto& e = j.at("rows")[i];
      only_keys(e, {"req", "kind", "tokens"}, f);
      require(e.contains("kind") && e.at("kind").is_string(), f + ".kind", "is missing or not a string");
      SessionRow r;
      r.kind = parse_row_kind(e.at("kind").get<std::string>(), f + ".kind");
      r.tokens = int_at(e, "tokens", f);
      if (r.kind == RowKind::Pad) require(!e.contains("req"), f + ".req", "a pad row belongs to no request");
      else r.req = int_at(e, "req", f);
      c.rows.push_back(r);
    }
    require(int_at(j, "tokens", field) == c.tokens(), field + ".tokens", "must be the rows' token count ", c.tokens());
  } else {
    fail(field + ".op", "must be mrope_admit, mrope_step, mrope_accept or mrope_release, got '", op, "'");
  }
  return c;
}

std::string SessionCommand::str() const {
  std::ostringstream os;
  switch (op) {
    case Op::Admit:
      os << "admit req " << req << " " << request_to_json(Request{segments})["segments"].dump();
      if (cached > 0) os << " cached " << cached;
      break;
    case Op::Release: os << "release req " << req; break;
    case Op::Accept:
      os << "accept [";
      for (std::size_t i = 0; i < accepted.size(); ++i)
        os << (i ? ", " : "") << "req " << accepted[i].first << " n=" << accepted[i].second;
      os << "]";
      break;
    case Op::Step:
      os << "step of " << tokens() << " tokens [";
      for (std::size_t i = 0; i < rows.size(); ++i) {
        os << (i ? ", " : "");
        if (rows[i].kind != RowKind::Pad) os << "req " << rows[i].req << " ";
        os << to_string(rows[i].kind) << " " << rows[i].tokens;
      }
      os << "]";
      break;
  }
  return os.str();
}

ojson preset_to_json(const Preset& p) {
  return ojson{{"model", p.name},
               {"head_dim", p.head_dim},
               {"rotary_dim", p.rotary_dim()},
               {"theta", p.theta},
               {"mrope_section", p.section},
               {"interleaved", p.layout == Layout::Interleaved},
               {"spatial_merge_size", p.spatial_merge_size},
               {"temporal_patch_size", p.temporal_patch_size},
               {"video_rule", to_string(p.video_rule)},
               {"tokens_per_second", p.tokens_per_second}};
}

Preset preset_from_json(const nlohmann::json& j, const std::string& field) {
  only_keys(j, {"model", "head_dim", "rotary_dim", "theta", "mrope_section", "interleaved", "spatial_merge_size",
                "temporal_patch_size", "video_rule", "tokens_per_second"},
            field);
  Preset p;
  if (j.contains("model")) {
    require(j.at("model").is_string(), field + ".model", "must be a string");
    p.name = j.at("model").get<std::string>();
  }
  p.head_dim = static_cast<int>(int_at(j, "head_dim", field));
  const std::int64_t R = int_at(j, "rotary_dim", field);
  require(p.head_dim >= 1 && R >= 1 && R <= p.head_dim, field + ".rotary_dim", "must be in [1, head_dim]");
  p.partial_rotary_factor = static_cast<double>(R) / p.head_dim;
  require(j.contains("theta") && j.at("theta").is_number(), field + ".theta", "must be a number");
  p.theta = j.at("theta").get<double>();
  require(j.contains("mrope_section") && j.at("mrope_section").is_array() && j.at("mrope_section").size() == 3,
          field + ".mrope_section", "must be three integers");
  for (int i = 0; i < 3; ++i) {
    require(j.at("mrope_section")[i].is_number_integer(), field + ".mrope_section", "must be three integers");
    p.section[static_cast<std::size_t>(i)] = j.at("mrope_section")[i].get<int>();
  }
  require(j.contains("interleaved") && j.at("interleaved").is_boolean(), field + ".interleaved", "must be true or false");
  p.layout = j.at("interleaved").get<bool>() ? Layout::Interleaved : Layout::Chunked;
  p.spatial_merge_size = static_cast<int>(int_at(j, "spatial_merge_size", field));
  p.temporal_patch_size = static_cast<int>(int_at(j, "temporal_patch_size", field));
  require(j.contains("video_rule") && j.at("video_rule").is_string(), field + ".video_rule", "must be a string");
  p.video_rule = parse_video_rule(j.at("video_rule").get<std::string>(), field + ".video_rule");
  if (j.contains("tokens_per_second")) {
    require(j.at("tokens_per_second").is_number(), field + ".tokens_per_second", "must be a number");
    p.tokens_per_second = j.at("tokens_per_second").get<double>();
  }
  require(p.rotary_dim() == R, field + ".rotary_dim", "must be head_dim * a factor the preset can hold");
  p.validate();
  return p;
}

ojson SessionCase::to_json() const {
  ojson cmds = ojson::array();
  for (const auto& c : commands) cmds.push_back(c.to_json());
  return ojson{{"mrope", {{"config", preset_to_json(preset)}, {"q_heads", q_heads}, {"k_heads", k_heads}}},
               {"seed", seed},
               {"commands", cmds}};
}

SessionCase SessionCase::from_json(const nlohmann::json& j, const std::string& field) {
  only_keys(j, {"mrope", "seed", "commands"}, field);
  SessionCase sc;
  require(j.contains("mrope"), field + ".mrope", "is missing");
  const auto& m = j.at("mrope");
  only_keys(m, {"config", "q_heads", "k_heads"}, field + ".mrope");
  require(m.contains("config"), field + ".mrope.config", "is missing");
  sc.preset = preset_from_json(m.at("config"), field + ".mrope.config");
  sc.q_heads = int_at(m, "q_heads", field + ".mrope");
  sc.k_heads = int_at(m, "k_heads", field + ".mrope");
  require(sc.q_heads >= 1 && sc.q_heads <= 64, field + ".mrope.q_heads", "must be in [1, 64]");
  require(sc.k_heads >= 1 && sc.k_heads <= 64, field + ".mrope.k_heads", "must be in [1, 64]");
  require(j.contains("seed") && j.at("seed").is_number_unsigned(), field + ".seed", "must be an unsigned integer");
  sc.seed = j.at("seed").get<std::uint64_t>();
  require(j.contains("commands") && j.at("commands").is_array(), field + ".commands", "must be an array");
  for (std::size_t i = 0; i < j.at("commands").size(); ++i)
    sc.commands.push_back(SessionCommand::from_json(j.at("commands")[i], field + ".commands[" + std::to_string(i) + "]"));
  return sc;
}

std::pair<std::vector<float>, std::vector<float>> step_inputs(const SessionCase& sc, std::size_t c) {
  const std::int64_t N = sc.commands.at(c).tokens();
  const std::int64_t D = sc.preset.head_dim;
  Rng rq(derive_seed(sc.seed, 2 * c + 100)), rk(derive_seed(sc.seed, 2 * c + 101));
  std::vector<float> q(static_cast<std::size_t>(N * sc.q_heads * D)), k(static_cast<std::size_t>(N * sc.k_heads * D));
  for (auto& x : q) x = rq.uniform(-1.0f, 1.0f);
  for (auto& x : k) x = rk.uniform(-1.0f, 1.0f);
  return {q, k};
}

}  // namespace replayssm::mrope
