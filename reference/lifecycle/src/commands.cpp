// Lifecycle commands: JSON form (fuzz dumps) and one-line descriptions.
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "replayssm/error.hpp"
#include "replayssm/lifecycle/command.hpp"
#include "replayssm/strict_json.hpp"

namespace replayssm::ref {

namespace {
constexpr std::int64_t kI32Min = std::numeric_limits<std::int32_t>::min();
constexpr std::int64_t kI32Max = std::numeric_limits<std::int32_t>::max();

const char* kind_name(Cmd::Kind k) {
  switch (k) {
    case Cmd::Kind::Admit: return "admit";
    case Cmd::Kind::Step: return "step";
    case Cmd::Kind::Finish: return "finish";
    case Cmd::Kind::Continue: return "continue";
    case Cmd::Kind::Copy: return "copy";
    case Cmd::Kind::Preempt: return "preempt";
    case Cmd::Kind::Resume: return "resume";
    case Cmd::Kind::Capture: return "capture";
    case Cmd::Kind::SelfCheck: return "self_check";
  }
  return "?";
}
}  // namespace

std::string to_string(Cmd::Kind k) { return kind_name(k); }

nlohmann::json Cmd::to_json() const {
  nlohmann::json j{{"kind", kind_name(kind)}};
  switch (kind) {
    case Kind::Step: {
      auto rs = nlohmann::json::array();
      for (const auto& r : rows) {
        rs.push_back({{"req", r.req}, {"T", r.T}, {"accepted", r.accepted}, {"stop_at", r.stop_at},
                      {"seed", std::to_string(r.seed)}});
        if (r.to_slot >= 0) rs.back()["to_slot"] = r.to_slot;  // out-of-place commits only
      }
      j["rows"] = rs;
      j["pad_at"] = pad_at;
      if (graph > 0) {
        j["graph"] = graph;
        j["stale_tail"] = stale_tail;
        if (replay_T > 0) j["replay_T"] = replay_T;  // graph replays only
      }
      break;
    }
    case Kind::Capture:
      j["graph"] = graph;
      j["T"] = capture_T;
      break;
    case Kind::SelfCheck: {
      auto rs = nlohmann::json::array();
      for (const auto& r : rows)
        rs.push_back({{"req", r.req}, {"T", r.T}, {"accepted", r.accepted}, {"seed", std::to_string(r.seed)}});
      j["check"] = to_string(self_check);
      j["rows"] = rs;
      j["forks"] = forks;
      break;
    }
    default:
      j["req"] = req;
      j["req2"] = req2;
      j["slot"] = slot;
      j["prompt"] = prompt;
      j["seed"] = std::to_string(seed);
  }
  return j;
}

Cmd Cmd::from_json(const nlohmann::json& j, const std::string& field) {
  // As strict as a fixture: every key required, no other key, integers as JSON integers in range, seeds as
  // full-match decimal text (strict_json.hpp). Errors name the key under `field`.
  auto i32 = [](const nlohmann::json& o, const char* key, const std::string& f, std::int64_t lo = kI32Min) {
    return static_cast<std::int32_t>(json_int(require_key(o, key, f), f + "." + key, lo, kI32Max));
  };
  auto seed = [](const nlohmann::json& o, const std::string& f) {
    return parse_decimal_u64(json_string(require_key(o, "seed", f), f + ".seed"), f + ".seed");
  };
  require(j.is_object(), field, "must be a JSON object, got ", j.type_name());
  Cmd c;
  const std::string& k = json_string(require_key(j, "kind", field), field + ".kind");
  bool found = false;
  for (auto kk : {Kind::Admit, Kind::Step, Kind::Finish, Kind::Continue, Kind::Copy, Kind::Preempt, Kind::Resume,
                  Kind::Capture, Kind::SelfCheck})
    if (k == kind_name(kk)) {
      c.kind = kk;
      found = true;
    }
  require(found, field + ".kind", "unknown command kind '", k, "'");
  if (c.kind == Kind::Step) {
    require_only_keys(j, {"kind", "rows", "pad_at", "graph", "stale_tail", "replay_T"}, field);
    require(!j.contains("replay_T") || j.contains("graph"), field + ".replay_T",
            "is set on an eager step (only a captured step, with graph, replays a bucket)");
    require(j.contains("graph") == j.contains("stale_tail"), field + (j.contains("graph") ? ".stale_tail" : ".graph"),
            "is missing (a captured step has both graph and stale_tail)");
    if (j.contains("graph")) {
      c.graph = static_cast<std::int32_t>(json_int(j.at("graph"), field + ".graph", 1, kI32Max));
      require(j.at("stale_tail").is_boolean(), field + ".stale_tail", "must be true or false");
      c.stale_tail = j.at("stale_tail").get<bool>();
      if (j.contains("replay_T"))
        c.replay_T = static_cast<std::int32_t>(json_int(j.at("replay_T"), field + ".replay_T", 1, kI32Max));
    }
    const nlohmann::json& rows = require_key(j, "rows", field);
    require(rows.is_array(), field + ".rows", "must be an array of rows");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const std::string rf = field + ".rows[" + std::to_string(i) + "]";
      require_only_keys(rows[i], {"req", "T", "accepted", "stop_at", "seed", "to_slot"}, rf);
      c.rows.push_back(RowSpec{i32(rows[i], "req", rf, 0), i32(rows[i], "T", rf, 1), i32(rows[i], "accepted", rf, 0),
                               i32(rows[i], "stop_at", rf, 0), seed(rows[i], rf)});
      if (rows[i].contains("to_slot")) c.rows.back().to_slot = i32(rows[i], "to_slot", rf, 0);
    }
    const nlohmann::json& pads = require_key(j, "pad_at", field);
    require(pads.is_array(), field + ".pad_at", "must be an array of row indices");
    for (std::size_t i = 0; i < pads.size(); ++i)
      c.pad_at.push_back(static_cast<std::int32_t>(
          json_int(pads[i], field + ".pad_at[" + std::to_string(i) + "]", 0, static_cast<std::int64_t>(c.rows.size()))));
  } else if (c.kind == Kind::Capture) {
    require_only_keys(j, {"kind", "graph", "T"}, field);
    c.graph = static_cast<std::int32_t>(json_int(require_key(j, "graph", field), field + ".graph", 1, kI32Max));
    c.capture_T = static_cast<std::int32_t>(json_int(require_key(j, "T", field), field + ".T", 1, kI32Max));
  } else if (c.kind == Kind::SelfCheck) {
    require_only_keys(j, {"kind", "check", "rows", "forks"}, field);
    c.self_check = parse_self_check_kind(json_string(require_key(j, "check", field), field + ".check"), field + ".check");
    const nlohmann::json& rows = require_key(j, "rows", field);
    require(rows.is_array() && !rows.empty(), field + ".rows", "must be a non-empty array of rows");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const std::string rf = field + ".rows[" + std::to_string(i) + "]";
      require_only_keys(rows[i], {"req", "T", "accepted", "seed"}, rf);
      c.rows.push_back(RowSpec{i32(rows[i], "req", rf, 0), i32(rows[i], "T", rf, 1), i32(rows[i], "accepted", rf, 0), 0,
                               seed(rows[i], rf)});
    }
    const nlohmann::json& forks = require_key(j, "forks", field);
    require(forks.is_array() && forks.size() == rows.size(), field + ".forks", "must be an array of ", rows.size(),
            " slots (one per row)");
    for (std::size_t i = 0; i < forks.size(); ++i)
      c.forks.push_back(static_cast<std::int32_t>(json_int(forks[i], field + ".forks[" + std::to_string(i) + "]", 0, kI32Max)));
  } else {
    require_only_keys(j, {"kind", "req", "req2", "slot", "prompt", "seed"}, field);
    c.req = i32(j, "req", field, 0);
    c.req2 = i32(j, "req2", field, 0);
    c.slot = i32(j, "slot", field);
    c.prompt = i32(j, "prompt", field, 0);
    c.seed = seed(j, field);
  }
  return c;
}

std::string Cmd::str() const {
  std::ostringstream os;
  os << kind_name(kind);
  if (kind == Kind::Step) {
    os << " [";
    for (std::size_t i = 0; i < rows.size(); ++i)
      os << (i ? ", " : "") << "req" << rows[i].req << " T=" << rows[i].T << " n=" << rows[i].accepted
         << (rows[i].stop_at ? " stop@" + std::to_string(rows[i].stop_at) : "")
         << (rows[i].to_slot >= 0 ? " ->slot" + std::to_string(rows[i].to_slot) : "");
    os << "]";
    if (!pad_at.empty()) os << " pads=" << pad_at.size();
    if (graph > 0) os << " graph=" << graph << (stale_tail ? " stale-tail" : " pad-tail");
    if (replay_T > 0) os << " replays rows=" << graph << " T=" << replay_T;
  } else if (kind == Kind::Capture) {
    os << " rows=" << graph << " T=" << capture_T;
  } else if (kind == Kind::SelfCheck) {
    os << " " << to_string(self_check) << " [";
    for (std::size_t i = 0; i < rows.size(); ++i)
      os << (i ? ", " : "") << "req" << rows[i].req << " T=" << rows[i].T << " n=" << rows[i].accepted;
    os << "] forks=";
    for (std::size_t i = 0; i < forks.size(); ++i) os << (i ? "," : "") << forks[i];
  } else {
    os << " req" << req;
    if (kind == Kind::Copy) os << " -> req" << req2;
    if (kind == Kind::Admit || kind == Kind::Continue || kind == Kind::Copy || kind == Kind::Resume)
      os << " slot=" << slot;
    if (kind == Kind::Admit || kind == Kind::Continue) os << " prompt=" << prompt;
  }
  return os.str();
}

}  // namespace replayssm::ref
