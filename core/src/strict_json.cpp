#include "replayssm/strict_json.hpp"

#include <limits>
#include <set>
#include <vector>

#include "replayssm/error.hpp"

namespace replayssm {

nlohmann::json parse_strict_json(std::string_view text, const std::string& field) {
  if (const auto nul = text.find('\0'); nul != std::string_view::npos)
    fail(field, "contains a NUL character at offset ", nul, " (invalid JSON)");
  // Depth first, in one pass over the bytes: nothing is built for a document that nests too deep.
  {
    int depth = 0;
    bool in_string = false, escaped = false;
    for (const char ch : text) {
      if (in_string) {
        if (escaped) escaped = false;
        else if (ch == '\\') escaped = true;
        else if (ch == '"') in_string = false;
      } else if (ch == '"') {
        in_string = true;
      } else if (ch == '{' || ch == '[') {
        if (++depth > kMaxJsonDepth) fail(field, "JSON nesting deeper than ", kMaxJsonDepth, " levels");
      } else if (ch == '}' || ch == ']') {
        --depth;
      }
    }
  }
  std::vector<std::set<std::string>> keys;  // one set per open object or array
  const nlohmann::json::parser_callback_t cb = [&](int, nlohmann::json::parse_event_t ev, nlohmann::json& v) {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start || ev == E::array_start) keys.emplace_back();
    if (ev == E::object_end || ev == E::array_end) keys.pop_back();
    if (ev == E::key && !keys.back().insert(v.get<std::string>()).second)
      fail(field, "duplicate key \"", v.get<std::string>(), "\" in its JSON text");
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), cb);
  } catch (const nlohmann::json::exception& e) {
    fail(field, "is not valid JSON text: ", e.what());
  }
}

void require_only_keys(const nlohmann::json& obj, std::initializer_list<const char*> allowed, const std::string& field) {
  require(obj.is_object(), field, "must be a JSON object, got ", obj.type_name());
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool known = false;
    for (const char* k : allowed) known = known || it.key() == k;
    if (!known) {
      std::string list;
      for (const char* k : allowed) list += (list.empty() ? "" : ", ") + std::string(k);
      fail(field + "." + it.key(), "unknown key (allowed here: ", list, ")");
    }
  }
}

const nlohmann::json& require_key(const nlohmann::json& obj, const char* key, const std::string& field) {
  require(obj.is_object(), field, "must be a JSON object, got ", obj.type_name());
  const auto it = obj.find(key);
  require(it != obj.end(), field + "." + key, "is missing");
  return *it;
}

std::int64_t json_int(const nlohmann::json& v, const std::string& field, std::int64_t lo, std::int64_t hi) {
  require(v.is_number_integer(), field, "must be an integer, got ", v.dump());
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    // nlohmann stores every non-negative integer as unsigned: both bounds apply here too.
    require(hi >= 0 && u <= static_cast<std::uint64_t>(hi) && (lo <= 0 || u >= static_cast<std::uint64_t>(lo)), field,
            "is ", u, ", outside [", lo, ", ", hi, "]");
    return static_cast<std::int64_t>(u);
  }
  const auto x = v.get<std::int64_t>();
  require(x >= lo && x <= hi, field, "is ", x, ", outside [", lo, ", ", hi, "]");
  return x;
}

const std::string& json_string(const nlohmann::json& v, const std::string& field) {
  require(v.is_string(), field, "must be a string, got ", v.dump());
  return v.get_ref<const std::string&>();
}

std::uint64_t parse_decimal_u64(std::string_view s, const std::string& field) {
  require(!s.empty(), field, "is empty (a decimal unsigned integer is expected)");
  require(s == "0" || s[0] != '0', field, "'", s, "' has a leading zero");
  std::uint64_t v = 0;
  for (char c : s) {
    require(c >= '0' && c <= '9', field, "'", s, "' is not a decimal unsigned integer");
    const auto d = static_cast<std::uint64_t>(c - '0');
    require(v <= (std::numeric_limits<std::uint64_t>::max() - d) / 10, field, "'", s, "' does not fit in 64 bits");
    v = v * 10 + d;
  }
  return v;
}

}  // namespace replayssm
