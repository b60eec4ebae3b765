// Lifecycle commands: JSON form (fuzz dumps) and one-line descriptions.
#include <nlohmann/json.hpp>
#include <sstream>

#include "replayssm/error.hpp"
#include "replayssm/reference/command.hpp"

namespace replayssm::ref {

namespace {
const char* kind_name(Cmd::Kind k) {
  switch (k) {
    case Cmd::Kind::Admit: return "admit";
    case Cmd::Kind::Step: return "step";
    case Cmd::Kind::Finish: return "finish";
    case Cmd::Kind::Continue: return "continue";
    case Cmd::Kind::Copy: return "copy";
    case Cmd::Kind::Preempt: return "preempt";
    case Cmd::Kind::Resume: return "resume";
  }
  return "?";
}
}  // namespace

nlohmann::json Cmd::to_json() const {
  nlohmann::json j{{"kind", kind_name(kind)}};
  switch (kind) {
    case Kind::Step: {
      auto rs = nlohmann::json::array();
      for (const auto& r : rows)
        rs.push_back({{"req", r.req}, {"T", r.T}, {"accepted", r.accepted}, {"stop_at", r.stop_at},
                      {"seed", std::to_string(r.seed)}});
      j["rows"] = rs;
      j["pad_at"] = pad_at;
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

Cmd Cmd::from_json(const nlohmann::json& j) {
  Cmd c;
  try {
    const std::string k = j.at("kind").get<std::string>();
    bool found = false;
    for (auto kk : {Kind::Admit, Kind::Step, Kind::Finish, Kind::Continue, Kind::Copy, Kind::Preempt, Kind::Resume})
      if (k == kind_name(kk)) {
        c.kind = kk;
        found = true;
      }
    require(found, "cmd.kind", "unknown command kind '", k, "'");
    if (c.kind == Kind::Step) {
      for (const auto& r : j.at("rows"))
        c.rows.push_back(RowSpec{r.at("req").get<std::int32_t>(), r.at("T").get<std::int32_t>(),
                                 r.at("accepted").get<std::int32_t>(), r.at("stop_at").get<std::int32_t>(),
                                 std::stoull(r.at("seed").get<std::string>())});
      c.pad_at = j.at("pad_at").get<std::vector<std::int32_t>>();
    } else {
      c.req = j.at("req").get<std::int32_t>();
      c.req2 = j.at("req2").get<std::int32_t>();
      c.slot = j.at("slot").get<std::int32_t>();
      c.prompt = j.at("prompt").get<std::int32_t>();
      c.seed = std::stoull(j.at("seed").get<std::string>());
    }
  } catch (const nlohmann::json::exception& e) {
    fail("cmd", "malformed command JSON: ", e.what());
  } catch (const std::logic_error& e) {
    if (dynamic_cast<const Error*>(&e)) throw;
    fail("cmd", "malformed number in command JSON: ", e.what());
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
         << (rows[i].stop_at ? " stop@" + std::to_string(rows[i].stop_at) : "");
    os << "]";
    if (!pad_at.empty()) os << " pads=" << pad_at.size();
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
