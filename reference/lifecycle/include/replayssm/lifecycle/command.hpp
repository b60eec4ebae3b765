// replayssm/lifecycle/command.hpp — the lifecycle commands a judged run is made of (admit, step, finish,
// continue, copy, preempt, resume, capture, self_check), with their JSON form (stored in replayable fuzz dumps) and a one-line
// description for reports.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "replayssm/lifecycle/self_check.hpp"

namespace replayssm::ref {

struct RowSpec {
  std::int32_t req = 0;       // request id
  std::int32_t T = 1;         // window (prefill: chunk length)
  std::int32_t accepted = 1;  // n in [0, T] (verify rows)
  std::int32_t stop_at = 0;   // early stop: the stop token is accepted token s (1..n); 0 = none
  std::uint64_t seed = 0;     // input seed for new tokens of this row
  // Verify rows: -1 commits in place; a free slot s commits out of place (write_slot = s, the read slot left
  // bitwise untouched) and the request moves to s when the commit writes (n > 0, no early stop).
  std::int32_t to_slot = -1;
};

struct Cmd {
  enum class Kind : std::uint8_t { Admit, Step, Finish, Continue, Copy, Preempt, Resume, Capture, SelfCheck };
  Kind kind = Kind::Step;
  std::int32_t req = 0;         // Admit/Finish/Continue/Copy(src)/Preempt/Resume
  std::int32_t req2 = 0;        // Copy: destination request id
  std::int32_t slot = 0;        // Admit/Continue/Copy/Resume: slot to allocate
  std::int32_t prompt = 0;      // Admit/Continue: new prompt tokens
  std::uint64_t seed = 0;       // Admit/Continue: prompt input seed
  std::vector<RowSpec> rows;    // Step: rows in batch order
  std::vector<std::int32_t> pad_at;  // Step: PAD rows inserted before these row indices (may repeat)
  // Step: CUDA-graph style capture. graph = 0: an eager step (exactly its rows). graph = C >= rows + PAD rows:
  // the step runs as a captured batch of C rows; rows beyond the live ones are the tail of the engine's
  // persistent, capacity-sized index buffer: with stale_tail, what earlier captured steps left there (stale
  // slot ids of a larger batch); without, PAD sentinels (TargetRow::graph_tail).
  //
  // Capture: the target captures (warms up and records) a new CUDA-graph bucket of `graph` rows of `capture_T`
  // tokens each on dummy inputs, while requests are live (Target::capture); nothing observable may change.
  std::int32_t graph = 0;
  bool stale_tail = false;
  std::int32_t capture_T = 0;  // Capture: the window of every row of the captured step, in [1, max_T]
  // Step (graph replay, protocol 1.9): > 0 when the captured step replays the bucket an earlier Capture of this
  // case recorded with graph rows of replay_T tokens each: exactly `graph` rows (live rows, PAD rows and graph
  // tail), every live row a verify row of replay_T tokens, PAD and tail rows replay_T wide too. The target is
  // told (Target::replaying) and may keep from the capture only the bucket's shape and its own buffers; slots,
  // accepted counts, live_rows and inputs are this step's.
  std::int32_t replay_T = 0;
  // SelfCheck (self_check.hpp): the check, its rows (req, T, accepted and seed; every request running and done
  // prefilling, each once) and one free slot per row, forks[i] for row i: copied from the request's slot before
  // each path (path A, then a fresh copy for path B). The request table does not change; the forks are free after.
  SelfCheckKind self_check = SelfCheckKind::VerifyVsSteps;
  std::vector<std::int32_t> forks;

  nlohmann::json to_json() const;
  // Reads to_json()'s form strictly: every key of the kind's form required and no other, integers as JSON
  // integers in int32 range (req, req2, prompt, accepted, stop_at >= 0; T >= 1; pad_at in [0, rows]), seeds
  // as full-match decimal uint64 text. Error("<field>.<key>", e.g. "cmd.rows[2].seed") otherwise. A row's
  // "to_slot" (integer >= 0) is written only for an out-of-place commit. A step's
  // "graph" (integer >= 0) and "stale_tail" (boolean) are written only for a captured step (graph > 0) and
  // read as a pair: both or neither; "replay_T" (integer >= 1) only on a captured step that replays. A capture is {"kind": "capture", "graph": C >= 1, "T": T >= 1}. A self check
  // is {"kind": "self_check", "check": name, "rows": [{"req", "T", "accepted", "seed"}], "forks": [slots >= 0]}.
  static Cmd from_json(const nlohmann::json& j, const std::string& field = "cmd");
  std::string str() const;
};

std::string to_string(Cmd::Kind k);  // "admit", "step", "finish", ...

}  // namespace replayssm::ref
