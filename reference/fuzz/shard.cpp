#include "shard.hpp"

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "replayssm/error.hpp"

namespace replayssm::fuzz {

namespace {

// A non-negative decimal integer, or -1.
long long parse_count(const std::string& s) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(s);
}

// SplitMix64's output function: a bijection of 64-bit words.
std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

std::string Shard::str() const { return std::to_string(index) + "/" + std::to_string(count); }

nlohmann::json Shard::to_json() const { return {{"index", index}, {"count", count}}; }

Shard parse_shard(const std::string& text, const std::string& field) {
  const auto slash = text.find('/');
  const long long i = slash == std::string::npos ? -1 : parse_count(text.substr(0, slash));
  const long long n = slash == std::string::npos ? -1 : parse_count(text.substr(slash + 1));
  require(i >= 0 && n >= 1, field, "must be I/N with integers 0 <= I < N, got '", text, "'");
  require(i < n, field, "index ", i, " is not below the shard count ", n, " (shards are numbered from 0)");
  return Shard{static_cast<int>(i), static_cast<int>(n)};
}

Shard shard_from_env() {
  const char* idx = std::getenv("GTEST_SHARD_INDEX");
  const char* tot = std::getenv("GTEST_TOTAL_SHARDS");
  if (!idx && !tot) return Shard{};
  require(idx && tot, idx ? "GTEST_TOTAL_SHARDS" : "GTEST_SHARD_INDEX",
          "is not set while ", idx ? "GTEST_SHARD_INDEX" : "GTEST_TOTAL_SHARDS", " is: set both or neither");
  const long long i = parse_count(idx), n = parse_count(tot);
  require(n >= 1, "GTEST_TOTAL_SHARDS", "must be a positive integer, got '", tot, "'");
  require(i >= 0 && i < n, "GTEST_SHARD_INDEX", "must be an integer in [0, ", n, "), got '", idx, "'");
  return Shard{static_cast<int>(i), static_cast<int>(n)};
}

Shard resolve_shard(const std::string& option) { return option.empty() ? shard_from_env() : parse_shard(option); }

int shard_cases(int cases, const Shard& s) {
  require(s.count <= cases, "shard", s.count, " shards for a campaign of ", cases,
          " cases: every shard needs at least one case (use fewer shards or more --cases)");
  return cases / s.count + (s.index < cases % s.count ? 1 : 0);
}

std::uint64_t shard_seed(std::uint64_t seed, const Shard& s) {
  if (!s.sharded()) return seed;
  // mix is a bijection, so distinct (seed + golden * (index + 1)) give distinct shard seeds.
  return mix(seed + 0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(s.index + 1));
}

}  // namespace replayssm::fuzz
