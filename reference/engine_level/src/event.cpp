// Engine-level request events: JSON form (dumps) and one-line descriptions.
#include "replayssm/engine_level/event.hpp"

#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "replayssm/error.hpp"
#include "replayssm/strict_json.hpp"

namespace replayssm::ref::engine_level {

namespace {
constexpr std::int64_t kI32Max = std::numeric_limits<std::int32_t>::max();
constexpr Event::Kind kKinds[] = {Event::Kind::Admit,  Event::Kind::Step, Event::Kind::Finish,
                                  Event::Kind::Preempt, Event::Kind::Resume, Event::Kind::Fork,
                                  Event::Kind::PrefixHit, Event::Kind::SnapshotHit, Event::Kind::Migrate};
}  // namespace

const char* kind_name(Event::Kind k) {
  switch (k) {
    case Event::Kind::Admit: return "admit";
    case Event::Kind::Step: return "step";
    case Event::Kind::Finish: return "finish";
    case Event::Kind::Preempt: return "preempt";
    case Event::Kind::Resume: return "resume";
    case Event::Kind::Fork: return "fork";
    case Event::Kind::PrefixHit: return "prefix_hit";
    case Event::Kind::SnapshotHit: return "snapshot_hit";
    case Event::Kind::Migrate: return "migrate";
  }
  return "?";
}

nlohmann::json Event::to_json() const {
  nlohmann::json j{{"kind", kind_name(kind)}};
  switch (kind) {
    case Kind::Step: {
      auto es = nlohmann::json::array();
      for (const auto& e : entries)
        es.push_back({{"req", e.req}, {"T", e.T}, {"accepted", e.accepted}, {"eog_at", e.eog_at},
                      {"seed", std::to_string(e.seed)}});
      j["entries"] = es;
      break;
    }
    case Kind::Admit:
      j.update({{"req", req}, {"prompt", prompt}, {"max_new", max_new}, {"seed", std::to_string(seed)}});
      break;
    case Kind::PrefixHit:
    case Kind::SnapshotHit:
      j.update({{"req", req}, {"from", from}, {"prompt", prompt}, {"max_new", max_new}, {"seed", std::to_string(seed)}});
      break;
    case Kind::Fork: j.update({{"req", req}, {"from", from}}); break;
    default: j["req"] = req;
  }
  return j;
}

Event Event::from_json(const nlohmann::json& j, const std::string& field) {
  auto i32 = [](const nlohmann::json& o, const char* key, const std::string& f, std::int64_t lo) {
    return static_cast<std::int32_t>(json_int(require_key(o, key, f), f + "." + key, lo, kI32Max));
  };
  auto seed = [](const nlohmann::json& o, const std::string& f) {
    return parse_decimal_u64(json_string(require_key(o, "seed", f), f + ".seed"), f + ".seed");
  };
  require(j.is_object(), field, "must be a JSON object");
  Event e;
  const std::string& k = json_string(require_key(j, "kind", field), field + ".kind");
  bool found = false;
  for (auto kk : kKinds)
    if (k == kind_name(kk)) {
      e.kind = kk;
      found = true;
    }
  require(found, field + ".kind", "unknown event kind '", k, "'");
  switch (e.kind) {
    case Kind::Step: {
      require_only_keys(j, {"kind", "entries"}, field);
      const auto& es = require_key(j, "entries", field);
      require(es.is_array(), field + ".entries", "must be an array");
      for (std::size_t i = 0; i < es.size(); ++i) {
        const std::string f = field + ".entries[" + std::to_string(i) + "]";
        require_only_keys(es[i], {"req", "T", "accepted", "eog_at", "seed"}, f);
        e.entries.push_back(StepEntry{i32(es[i], "req", f, 0), i32(es[i], "T", f, 1), i32(es[i], "accepted", f, 0),
                                      i32(es[i], "eog_at", f, 0), seed(es[i], f)});
      }
      break;
    }
    case Kind::Admit:
      require_only_keys(j, {"kind", "req", "prompt", "max_new", "seed"}, field);
      e.req = i32(j, "req", field, 0);
      e.prompt = i32(j, "prompt", field, 1);
      e.max_new = i32(j, "max_new", field, 1);
      e.seed = seed(j, field);
      break;
    case Kind::PrefixHit:
    case Kind::SnapshotHit:
      require_only_keys(j, {"kind", "req", "from", "prompt", "max_new", "seed"}, field);
      e.req = i32(j, "req", field, 0);
      e.from = i32(j, "from", field, 0);
      e.prompt = i32(j, "prompt", field, 1);
      e.max_new = i32(j, "max_new", field, 1);
      e.seed = seed(j, field);
      break;
    case Kind::Fork:
      require_only_keys(j, {"kind", "req", "from"}, field);
      e.req = i32(j, "req", field, 0);
      e.from = i32(j, "from", field, 0);
      break;
    default:
      require_only_keys(j, {"kind", "req"}, field);
      e.req = i32(j, "req", field, 0);
  }
  return e;
}

std::string Event::str() const {
  std::ostringstream os;
  os << kind_name(kind);
  if (kind == Kind::Step) {
    os << " [";
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const auto& e = entries[i];
      os << (i ? ", " : "") << "req" << e.req << " T=" << e.T << " n=" << e.accepted;
      if (e.eog_at) os << " eog@" << e.eog_at;
    }
    os << "]";
    return os.str();
  }
  os << " req" << req;
  const bool hit = kind == Kind::PrefixHit || kind == Kind::SnapshotHit;
  if (kind == Kind::Fork || hit) os << " from req" << from;
  if (kind == Kind::Admit || hit) os << " prompt=" << prompt << " max_new=" << max_new;
  return os.str();
}

}  // namespace replayssm::ref::engine_level
