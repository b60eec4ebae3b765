// Engine-level fuzz campaigns: `replayssm fuzz --level engine`. Each case draws a seeded setup (the preset's
// model, seeded layer parameters) and engine options (both commit modes, both bufferings, unless fixed), runs
// a generated event sequence through the engine-level judge with the bookkeeping model, shrinks the first
// failure and dumps it as a replayable engine case (engine_case.hpp).
#pragma once

#include <iosfwd>
#include <optional>
#include <string>

#include "campaign.hpp"
#include "replayssm/engine_level/request_engine.hpp"

namespace replayssm::fuzz {

struct EngineFuzzOptions {
  std::string target = "reference";  // request_engine_kinds()
  ModelConfig cfg;
  std::uint64_t seed = 1;
  int cases = 100;
  int max_commands = 100;
  int max_live = 4;
  int max_T = 4;
  std::optional<ref::engine_level::CommitMode> commit;  // fixed, or drawn per case
  std::optional<ref::engine_level::Buffering> buffers;  // fixed, or drawn per case
  ref::engine_level::EngineFault fault = ref::engine_level::EngineFault::None;
  std::string dump_dir;
  CampaignControl control;  // shrink budget, time budget, watchdog (rc_campaign.hpp)
};

FuzzReport run_engine_fuzz(const EngineFuzzOptions& opt, std::ostream* progress);

// Re-runs a dumped engine case against the recorded engine (or `target` when given); "" if it passes now.
std::string replay_engine_dump(const std::string& path, const std::string& target = "", std::string* notes = nullptr);

}  // namespace replayssm::fuzz
