// replayssm/strict_json.hpp — reading untrusted JSON text and its numbers without silent conversions.
//
// nlohmann::json on its own keeps the last of two duplicate keys, stops at a NUL byte and converts numbers
// on get<T>() (3.7 becomes 3, 2^40 wraps in an int32). Every parser of hostile input in the project (fixture
// metadata, fuzz-case files, MRoPE requests, model configs) reads through these helpers instead, so the same
// input is refused the same way everywhere. Every refusal is replayssm::Error naming `field`.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace replayssm {

// Deepest nesting of objects and arrays accepted by parse_strict_json (a valid document of the project nests
// at most 5 levels; the cap keeps a crafted "[[[[..." from costing memory and time).
inline constexpr int kMaxJsonDepth = 64;

// Parses JSON text, refusing a NUL character, a duplicate key in any object ("duplicate key \"k\""),
// nesting deeper than kMaxJsonDepth and invalid JSON. Errors are Error(field, ...).
nlohmann::json parse_strict_json(std::string_view text, const std::string& field);

// Refuses (Error("<field>.<key>")) any key of `obj` not in `allowed`; `obj` must be an object (Error(field)).
void require_only_keys(const nlohmann::json& obj, std::initializer_list<const char*> allowed, const std::string& field);

// The member `key` of `obj`; Error("<field>.<key>", "is missing") when absent.
const nlohmann::json& require_key(const nlohmann::json& obj, const char* key, const std::string& field);

// A JSON integer (not a float such as 3.0 or 3.7, not a string) in [lo, hi]; Error(field) otherwise.
std::int64_t json_int(const nlohmann::json& v, const std::string& field, std::int64_t lo, std::int64_t hi);
// A JSON string; Error(field) otherwise.
const std::string& json_string(const nlohmann::json& v, const std::string& field);

// A decimal unsigned 64-bit integer written as text: one or more digits, no sign, no blank, no leading zero
// (except "0"), value below 2^64. Error(field) otherwise. (std::stoull accepts "  -1x" as 2^64 - 1.)
std::uint64_t parse_decimal_u64(std::string_view s, const std::string& field);

}  // namespace replayssm
