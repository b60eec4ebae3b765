// The replayable engine-level case file: what a failing `replayssm fuzz --level engine` campaign dumps and
// `--replay` reads back. A safetensors file like the kernel-level fuzz case (fuzz_case.hpp) whose
// __metadata__ holds exactly these string keys:
//   schema          "replayssm.engine_case"
//   schema_version  "1"
//   setup           JSON text: EngineSetup::to_json(), read as strictly as in a fuzz case (same keys, caps)
//   options         JSON text: an array of 1 to 4 EngineOptions::to_json() objects (max_live, commit, buffers),
//                   one per engine judged in lock step, all with one max_live
//   target          the engine-level implementation ("reference")
//   fault           an engine-level fault name (request_engine.hpp)
//   events          JSON text: an array of Event::to_json() objects (event.hpp), at most kCaseMaxCommands
//   reason          the first disagreement, as reported
// and exactly the tensors param.A_log.<l> and param.dt_bias.<l> of every layer. Parsing runs nothing; every
// refusal is Error naming the field ("__metadata__.events[2].entries[0].T").
#pragma once

#include <string>
#include <vector>

#include "replayssm/engine_level/request_engine.hpp"
#include "replayssm/safetensors.hpp"

namespace replayssm::fuzz {

inline constexpr const char* kEngineCaseSchema = "replayssm.engine_case";

struct EngineCase {
  ref::engine_level::EngineLevelSetup setup;               // setup.options = variants[0]
  std::vector<ref::engine_level::EngineOptions> variants;  // the engines' options
  std::string target;
  ref::engine_level::EngineFault fault = ref::engine_level::EngineFault::None;
  std::vector<ref::engine_level::Event> events;
  std::string reason;
};

EngineCase parse_engine_case(const SafetensorsFile& file);
EngineCase read_engine_case(const std::string& path);
SafetensorsFile engine_case_file(const EngineCase& c);
// Whether a safetensors file's metadata names the engine-level schema (to route `--replay`).
bool is_engine_case(const std::string& path);

}  // namespace replayssm::fuzz
