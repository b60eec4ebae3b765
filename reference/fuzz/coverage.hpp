// What a campaign exercised, and what a verdict requires of it (docs/lifecycle.md, "Verdict levels"): the
// coverage matrix (dimension, value: cases and rows that reached the implementation), the work done (rows by
// kind, verify widths with the accepted counts committed for each, commands by kind, events), and the unmet
// requirements of a claimed envelope. CONFORMANT needs every claimed value exercised in at least
// Requirements::min_cases_per_value cases and the work minimums met; otherwise a verdict without failures is
// INCOMPLETE, listing each unmet requirement.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "envelope.hpp"
#include "replayssm/lifecycle/judge.hpp"

namespace replayssm::fuzz {

struct Cell {
  long cases = 0;  // cases with this value
  long rows = 0;   // real rows (verify and prefill) those cases sent to the implementation
};

struct Coverage {
  std::map<std::string, std::map<std::string, Cell>> matrix;  // dimension -> value -> cell
  long cases = 0;
  ref::JudgedWork work;          // summed over the cases
  std::set<std::string> full_depth;  // ops ("gdn", "kda") with a full-depth campaign (kFullDepth)

  // One judged case: its setup's configuration values and its work.
  void add_case(const ref::EngineSetup& s, const ref::JudgedWork& w);
  void merge(const Coverage& o);
  nlohmann::json to_json() const;
  static Coverage from_json(const nlohmann::json& j, const std::string& field = "coverage");
};

// A campaign that counts as full depth: at least this many cases of up to this many commands.
inline constexpr int kFullDepthCases = 100, kFullDepthCommands = 100;

struct Requirements {
  int min_cases_per_value = 3;         // every claimed value of every dimension
  long min_real_rows = 500;            // rows that reached the implementation, per verdict
  int exhaustive_accepted_up_to = 8;   // widths up to this: every accepted count 0..T committed at least once;
                                       // wider ones up to 16: 0, T and one count in between; wider still: per
                                       // bucket of widths (17-24, 25-32, 33-48, 49-64) 0, T and one between
};

// The claims of one op: the envelope its campaigns drew from, and whether it claims a full-depth campaign
// (every kernel-level verdict does).
struct Claim {
  Op op = Op::GDN;
  Envelope envelope;
};

// Every unmet requirement of `claims` by `c`, one line each ("state_dtype BF16: 1 case (at least 3)"); empty
// when every claim was exercised.
std::vector<std::string> unmet(const std::vector<Claim>& claims, const Coverage& c, const Requirements& r);

// The verdict of a run: NOT CONFORMANT when something failed, else INCOMPLETE when a requirement is unmet or
// nothing was claimed, else CONFORMANT. Exit status: 0, 1 and 3 (2 is a usage error).
enum class Level { Conformant, NotConformant, Incomplete };
std::string to_string(Level l);  // "CONFORMANT", "NOT CONFORMANT", "INCOMPLETE"
int exit_status(Level l);
Level level_of(bool failed, bool claimed_anything, const std::vector<std::string>& unmet);

// The coverage matrix as printed beside a verdict: one line per dimension ("state_dtype  F32 41/9120  BF16
// 39/8871" = value cases/rows), then the work.
std::string matrix_text(const Coverage& c);

}  // namespace replayssm::fuzz
