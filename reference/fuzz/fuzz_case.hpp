// The replayable fuzz-case file of `replayssm fuzz`: what a failing campaign dumps and `--replay` reads back.
//
// A safetensors file (safetensors.hpp) whose __metadata__ holds exactly these string keys:
//   schema          "replayssm.fuzz_case"
//   schema_version  "1"
//   setup           JSON text: EngineSetup::to_json() (config, num_slots, slot_stride, max_T, ring_B, ring_T,
//                   recon, ring_record_dtype, page_tokens), every key required, no other key
//   target          the target kind the case was judged against ("replay", "exec:COMMAND", ...)
//   fault           the injected fault (fault.hpp names)
//   commands        JSON text: an array of Cmd::to_json() objects (command.hpp)
//   reason          the first disagreement, as reported (free text)
// and exactly the tensors param.A_log.<l> (F32 [HV]) and param.dt_bias.<l> (F32 [HV * a_width]) for every
// layer l < config.num_layers.
//
// parse_fuzz_case reads such a file as strictly as a fixture: unknown or missing keys, a wrong schema or
// schema_version, numbers that are not JSON integers in range, seeds that are not full-match decimal uint64
// text, duplicate JSON keys, and values past the caps below are refused with Error naming the field
// ("__metadata__.setup.num_slots", "__metadata__.commands[3].rows[0].T", "tensor 'param.A_log.0'"). The caps
// keep a hostile file from making a replay allocate or run without bound; the campaign's own options stay
// inside them (run_fuzz: slots <= 4096, max-T <= 64, max-commands <= 10000; generated prompts <= 13 tokens).
// Parsing runs nothing: the judge only sees a case that passed every check.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "replayssm/lifecycle/command.hpp"
#include "replayssm/lifecycle/fault.hpp"
#include "replayssm/lifecycle/target.hpp"
#include "replayssm/safetensors.hpp"

namespace replayssm::fuzz {

inline constexpr const char* kFuzzCaseSchema = "replayssm.fuzz_case";
inline constexpr const char* kFuzzCaseSchemaVersion = "1";

// Caps on a case file (see above).
inline constexpr std::int64_t kCaseMaxSlots = 4096;           // setup.num_slots
inline constexpr std::int64_t kCaseMaxT = 64;                 // setup.max_T, ring_T
inline constexpr std::int64_t kCaseMaxRingB = 4096;           // setup.ring_B
inline constexpr std::int64_t kCaseMaxPageTokens = 4096;      // setup.page_tokens
inline constexpr std::int64_t kCaseMaxPoolBytes = 4ll << 30;  // num_layers * num_slots * slot_stride * 4 bytes
inline constexpr std::int64_t kCaseMaxCommands = 10000;       // commands
inline constexpr std::int64_t kCaseMaxPrompt = 4096;          // a command's prompt tokens
inline constexpr std::int64_t kCaseMaxPads = 8;               // PAD rows of one step (EngineSetup::max_rows)

struct FuzzCase {
  ref::EngineSetup setup;        // params from the tensors, poison NaN (as make_setup)
  std::string target;            // the recorded target kind
  ref::Fault fault = ref::Fault::None;
  std::vector<ref::Cmd> commands;
  std::string reason;
};

// Validates and decodes a case file's contents (see above).
FuzzCase parse_fuzz_case(const SafetensorsFile& file);
// Reads and parses a case file; errors name the path.
FuzzCase read_fuzz_case(const std::string& path);
// The file form of a case (the writer; parse_fuzz_case(fuzz_case_file(c)) gives c back).
SafetensorsFile fuzz_case_file(const FuzzCase& c);

}  // namespace replayssm::fuzz
