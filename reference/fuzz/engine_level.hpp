// Stateful generation of engine-level request-event sequences (RapidCheck rc::state), shared by the property
// tests and `replayssm fuzz --level engine`. The abstract model below tracks only counts (status, committed,
// to prefill, generated, max_new per request) to generate valid events; written apart from the truth
// (truth.hpp) and from every engine, it is also the independent bookkeeping oracle both are checked against
// after every event.
#pragma once

#include <rapidcheck.h>
#include <rapidcheck/state.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "replayssm/engine_level/judge.hpp"

namespace replayssm::fuzz {

namespace el = ref::engine_level;

struct EngineModelRequest {
  el::Status status = el::Status::Running;
  std::int32_t committed = 0, to_prefill = 0, generated = 0, max_new = 1;
  std::int32_t snapshot = 0;  // block boundary of the latest prefix snapshot (0: none)
};

struct EngineLevelModel {
  std::int32_t max_live = 4;
  std::int32_t max_T = 4;
  std::int32_t block = 0;  // prefix-cache block (0: no snapshots, no snapshot_hit events)
  std::int32_t next_id = 0;
  std::map<std::int32_t, EngineModelRequest> reqs;
  std::int32_t resident() const;
  std::vector<std::int32_t> with(el::Status s, bool prompt_committed = false) const;
  // What e does to the counts, by this model's own rules. e must be valid for the model.
  void apply(const el::Event& e);
};

// "" when `table` (an engine's or the truth's request table) agrees with the model, else the first difference.
std::string table_disagreement(const EngineLevelModel& want, const std::map<std::int32_t, el::RequestStatus>& table,
                               const std::string& whose);

// The engine options an event sequence is judged under: every combination of commit mode and buffering,
// or only those matching a fixed mode (max_live from the argument).
std::vector<el::EngineOptions> option_variants(std::int32_t max_live, std::optional<el::CommitMode> commit = {},
                                               std::optional<el::Buffering> buffers = {});

// Runs one generated event sequence (inside a RapidCheck property) on an EngineJudge over one instance of
// make_request_engine(engine, fault) per entry of `variants` (empty: setup.options alone) — for engine
// "reference" also one spec-ring engine per in-place variant (judge_candidates) — all in
// lock step against one truth; after every event the judge's checks, then the truth's and every engine's request table
// against the model. On the first failure: records it (and the executed sequence) and fails.
void check_engine_level(const el::EngineLevelSetup& setup, const std::string& engine, el::EngineFault fault,
                        std::vector<el::Event>* last_failure = nullptr, std::string* last_reason = nullptr,
                        const std::vector<el::EngineOptions>& variants = {});

// Replays a recorded sequence with the same checks; "" or "event i (...): why".
std::string replay_events(const el::EngineLevelSetup& setup, const std::string& engine, el::EngineFault fault,
                          const std::vector<el::Event>& events, const std::vector<el::EngineOptions>& variants = {});

// A sequence from the same generator, deterministic in (seed, size).
std::vector<el::Event> generate_events(std::int32_t max_live, std::int32_t max_T, std::uint64_t seed, int size,
                                      std::int32_t block = 0);

// Engine options drawn for one case: both commit modes and both bufferings; prefix snapshots with a block
// of 2..5 tokens in three cases of four when `snapshots`.
rc::Gen<el::EngineOptions> engine_options(std::int32_t max_live, bool snapshots = true);

// The engines judged in lock step for `engine` under `variants` (see check_engine_level).
std::vector<el::EngineJudge::Candidate> judge_candidates(const el::EngineLevelSetup& setup, const std::string& engine,
                                                         el::EngineFault fault,
                                                         const std::vector<el::EngineOptions>& variants);

}  // namespace replayssm::fuzz
