// strict_json.hpp: what the shared reader of untrusted JSON refuses (found lax while fuzzing, docs/fuzzing.md).
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>

#include "replayssm/error.hpp"
#include "replayssm/strict_json.hpp"
#include "replayssm/testing/field_of.hpp"

using namespace replayssm;

namespace {
using replayssm::testing::field_of;
}  // namespace

TEST(StrictJson, RefusesDuplicateKeysNulAndDeepNesting) {
  EXPECT_EQ(field_of([] { parse_strict_json(R"({"a": 1, "a": 2})", "doc"); }), "doc");
  EXPECT_EQ(field_of([] { parse_strict_json(R"({"o": {"k": 1, "k": 1}})", "doc"); }), "doc");
  EXPECT_EQ(field_of([] { parse_strict_json(std::string("{\"a\": 1}\0{", 10), "doc"); }), "doc");
  EXPECT_EQ(field_of([] { parse_strict_json(std::string(65, '[') + std::string(65, ']'), "doc"); }), "doc");
  EXPECT_EQ(field_of([] { parse_strict_json("{", "doc"); }), "doc");
  // The same key in sibling objects, and 64 levels, are fine.
  EXPECT_EQ(parse_strict_json(R"([{"a": 1}, {"a": 2}])", "doc")[1]["a"], 2);
  EXPECT_NO_THROW(parse_strict_json(std::string(64, '[') + std::string(64, ']'), "doc"));
  // Brackets inside strings do not count as nesting.
  EXPECT_NO_THROW(parse_strict_json("\"" + std::string(100, '[') + "\"", "doc"));
}

TEST(StrictJson, IntegersAreJsonIntegersInRange) {
  const auto j = nlohmann::json::parse(R"([3, 3.0, 3.7, "3", 4294967297, -1, 18446744073709551615])");
  EXPECT_EQ(json_int(j[0], "x", 0, 10), 3);
  EXPECT_EQ(field_of([&] { json_int(j[1], "x", 0, 10); }), "x");  // 3.0 is a float
  EXPECT_EQ(field_of([&] { json_int(j[2], "x", 0, 10); }), "x");
  EXPECT_EQ(field_of([&] { json_int(j[3], "x", 0, 10); }), "x");
  EXPECT_EQ(field_of([&] { json_int(j[4], "x", 0, std::numeric_limits<std::int32_t>::max()); }), "x");  // no wrap
  EXPECT_EQ(field_of([&] { json_int(j[5], "x", 0, 10); }), "x");
  EXPECT_EQ(field_of([&] { json_int(j[6], "x", 0, std::numeric_limits<std::int64_t>::max()); }), "x");
  // A non-negative integer is held as unsigned by nlohmann: the lower bound applies to it too (found by
  // fuzz_replay_case: num_slots 0 passed [1, 4096] and divided by zero in the pool cap).
  const auto small = nlohmann::json::parse("[0, 1]");
  EXPECT_EQ(field_of([&] { json_int(small[0], "x", 1, 10); }), "x");
  EXPECT_EQ(json_int(small[1], "x", 1, 10), 1);
  EXPECT_EQ(json_int(small[0], "x", -5, 10), 0);
}

TEST(StrictJson, DecimalTextIsAFullMatch) {
  EXPECT_EQ(parse_decimal_u64("0", "seed"), 0u);
  EXPECT_EQ(parse_decimal_u64("18446744073709551615", "seed"), std::numeric_limits<std::uint64_t>::max());
  // std::stoull accepts every one of these (as 2^64 - 1, 12, 12, 12 and 12).
  for (const char* bad : {"-1", " 12", "12 ", "12abc", "+12", "012", "", "18446744073709551616", "0x10", "1e3"})
    EXPECT_EQ(field_of([&] { parse_decimal_u64(bad, "seed"); }), "seed") << bad;
}

TEST(StrictJson, OnlyKeysNamesTheUnknownKey) {
  const auto j = nlohmann::json::parse(R"({"a": 1, "zz": 2})");
  EXPECT_EQ(field_of([&] { require_only_keys(j, {"a"}, "obj"); }), "obj.zz");
  EXPECT_EQ(field_of([&] { require_key(j, "b", "obj"); }), "obj.b");
  EXPECT_EQ(field_of([&] { require_only_keys(nlohmann::json::array(), {"a"}, "obj"); }), "obj");
}
