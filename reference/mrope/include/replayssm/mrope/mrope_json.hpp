// replayssm/mrope/mrope_json.hpp — the JSON request format of `replayssm mrope positions` and its answer.
//
// Request document (docs/mrope.md has the full description and examples):
//   {
//     "description": "free text, ignored",                        (optional)
//     "segments": [                                                (required, may be empty)
//       {"type": "text",  "length": 3},
//       {"type": "image", "grid": [1, 4, 4]},                     T, H, W in patches before the merge
//       {"type": "video", "grid": [4, 4, 4], "second_per_grid": 1.0},   or "fps": 2.0
//       {"type": "video", "grid": [2, 4, 4], "frame_text": [3, 4]}      per-frame models only
//     ],
//     "generated": 2,                                              (optional) tokens after the prompt
//     "steps": [                                                   (optional) an engine schedule
//       {"prefill": 5}, {"verify": 4, "accepted": 2}, {"draft": 3}, {"stop": 12}, {"restart": 0},
//       {"turn": [ segments ]}
//     ]
//   }
// Unknown keys, wrong types and out-of-range values throw replayssm::Error naming the JSON path
// ("segments[1].grid", "steps[2].accepted", ...); the request text itself is refused (Error("request")) for
// a duplicate key in any object, a NUL character or nesting deeper than strict_json.hpp allows.
// Caps (each refused with the step's field): a verify window T and a draft count k are at most
// kMaxSpecTokens (1024); the counts of all prefill, verify, draft and restart steps of one schedule add up to
// at most kMaxScheduleTokens (2^26), so a small request cannot make the tracker walk without bound.
//
// Answer (one key per line, every array on one line; format_report):
//   {"model", "rotary_dim", "layout", "frequency_axes" (one letter per frequency: T, H or W), "prompt_len",
//    "delta", "generated", "positions": [[t...], [h...], [w...]] for indices [0, prompt_len + generated),
//    "steps": [ per step: what the forward fed (begin = first absolute index = KV slot, positions) and the
//    token accounting after it (num_computed, seq_len) ]}
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "replayssm/mrope/mrope.hpp"

namespace replayssm::mrope {

// Total of the prefill, verify, draft and restart counts of one request's steps.
inline constexpr std::int64_t kMaxScheduleTokens = std::int64_t{1} << 26;

// Parses request text strictly (strict_json.hpp): Error("request") for invalid JSON, a duplicate key, a NUL.
nlohmann::json parse_request_text(std::string_view text);

// Parses a JSON array of segment objects. `field` prefixes error names ("segments", "steps[3].turn").
std::vector<Segment> segments_from_json(const nlohmann::json& j, const std::string& field);
// {"segments": [...]} in the request format (timing and frame_text only where set).
nlohmann::ordered_json request_to_json(const Request& request);

// Runs the request document against the preset: from-scratch positions for the prompt (+ generated tokens)
// and, when "steps" is present, the incremental engine model step by step.
nlohmann::ordered_json positions_report(const Preset& preset, const nlohmann::json& doc);
// The text form printed by the CLI and stored in docs/examples/mrope/*.out.json (ends with a newline).
std::string format_report(const nlohmann::ordered_json& report);
// Reads the request file at `path`, runs it for `model` and returns format_report's text. Throws
// Error("request") for an unreadable file or invalid JSON, Error("model") for an unknown model.
std::string positions_report_text(const std::string& model, const std::string& path);

}  // namespace replayssm::mrope
