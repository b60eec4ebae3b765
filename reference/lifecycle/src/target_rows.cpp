// The protocol's JSON form of a batch (docs/target-protocol.md, "Rows of a step"): written by the exec target
// and by trace fixtures, read back by trace fixtures.
#include <nlohmann/json.hpp>

#include "replayssm/error.hpp"
#include "replayssm/lifecycle/target.hpp"

namespace replayssm::ref {

nlohmann::json rows_to_json(const std::vector<TargetRow>& rows, bool at_step) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& r : rows) {
    a.push_back(nlohmann::json{{"slot", r.row.slot},
                               {"write_slot", r.row.write_slot},
                               {"T", r.row.T},
                               {"token_offset", r.row.token_offset},
                               {"accepted", at_step && r.kind == RowKind::Verify ? 0 : r.row.accepted},
                               {"kind", r.kind == RowKind::Prefill ? "prefill" : "verify"},
                               {"fresh", r.fresh}});
    if (r.graph_tail) a.back()["graph_tail"] = true;  // protocol 1.2; absent means false
  }
  return a;
}

namespace {
std::int32_t int_key(const nlohmann::json& r, const char* k, const std::string& f) {
  require(r.contains(k), f + "." + k, "is missing");
  const auto& v = r.at(k);
  require(v.is_number_integer() && v.get<std::int64_t>() >= -1 && v.get<std::int64_t>() <= (1ll << 30),
          f + "." + k, "must be an integer in [-1, 2^30], got ", v.dump());
  return v.get<std::int32_t>();
}
}  // namespace

std::vector<TargetRow> rows_from_json(const nlohmann::json& j, const std::string& field) {
  require(j.is_array(), field, "must be an array of rows");
  std::vector<TargetRow> rows;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const std::string f = field + "[" + std::to_string(i) + "]";
    const auto& r = j[i];
    require(r.is_object(), f, "must be an object");
    TargetRow t;
    t.row = BatchRow{int_key(r, "slot", f), int_key(r, "write_slot", f), int_key(r, "T", f),
                     int_key(r, "token_offset", f), int_key(r, "accepted", f)};
    require(r.contains("kind") && r.at("kind").is_string() &&
                (r.at("kind") == "verify" || r.at("kind") == "prefill"),
            f + ".kind", "must be \"verify\" or \"prefill\"");
    t.kind = r.at("kind") == "prefill" ? RowKind::Prefill : RowKind::Verify;
    require(r.contains("fresh") && r.at("fresh").is_boolean(), f + ".fresh", "must be true or false");
    t.fresh = r.at("fresh").get<bool>();
    if (r.contains("graph_tail")) {
      require(r.at("graph_tail").is_boolean(), f + ".graph_tail", "must be true or false");
      t.graph_tail = r.at("graph_tail").get<bool>();
    }
    require(t.graph_tail || rows.empty() || !rows.back().graph_tail, f + ".graph_tail",
            "a live row follows a graph tail row (tail rows come after every live row)");
    rows.push_back(t);
  }
  return rows;
}

}  // namespace replayssm::ref
