// Sharded campaigns: one campaign of `cases` cases split over N independent runs (CI matrix jobs, a batch
// scheduler's array tasks). Shard i of N runs shard_cases(cases, i/N) cases from shard_seed(seed, i/N): the N
// shards together run exactly `cases` cases, each shard from its own seed (distinct across shards), and
// shard i is reproduced alone by the same options with --shard i/N. A single shard (0/1) is the unsharded
// campaign itself: its seed is the campaign's seed.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace replayssm::fuzz {

struct Shard {
  int index = 0;  // 0 .. count - 1
  int count = 1;
  bool sharded() const { return count > 1; }
  std::string str() const;  // "I/N"
  nlohmann::json to_json() const;  // {"index": I, "count": N}
};

// "I/N" with 0 <= I < N; Error(field) otherwise.
Shard parse_shard(const std::string& text, const std::string& field = "shard");
// GTEST_SHARD_INDEX / GTEST_TOTAL_SHARDS (the sharding variables test runners and CI systems already set),
// {0, 1} when neither is set; Error naming the variable when one is missing, malformed or out of range.
Shard shard_from_env();
// The --shard option's value when given, else the environment's.
Shard resolve_shard(const std::string& option);

// Cases of shard s: cases / N, plus one for the first cases % N shards. Error("shard") when N > cases.
int shard_cases(int cases, const Shard& s);
// The shard's seed: `seed` itself for an unsharded campaign, else a SplitMix64 mix of (seed, index), distinct
// for distinct indices.
std::uint64_t shard_seed(std::uint64_t seed, const Shard& s);
// Whether item k of a list (fixtures) belongs to shard s: k % N == I.
inline bool in_shard(std::size_t k, const Shard& s) { return static_cast<int>(k % s.count) == s.index; }

}  // namespace replayssm::fuzz
