// `replayssm report html INPUT -o OUT.html`: one self-contained page (no network, no external file) for a
// failure or a verdict, to look at instead of reading the JSON:
//   * the verdict per target with its coverage matrix and the unmet requirements (from a --json report);
//   * the failing case's command sequence as a timeline: one lane per slot (which request holds it after each
//     command, the rows each step ran on it), the first divergent command marked (id "first-divergence",
//     data-command = its index);
//   * the worst tensor of that divergence drawn per head: expected (the oracle's), obtained (the
//     implementation's) and their difference, as heat maps (at most kMaxHeads heads, those with the largest
//     error first).
// INPUT is a fuzz failure dump (.safetensors, replayed here to find the divergence and its tensors) or a --json
// report of fuzz or conform (its verdicts; the first failed campaign's dump drawn when the file is there).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace replayssm::cli {

inline constexpr int kMaxHeads = 8;

// The page's data: {"title", "verdicts": [...], "case": {...}, "tensor": {...}} (keys absent when not known).
nlohmann::json html_data_from_dump(const std::string& dump_path);
nlohmann::json html_data_from_report(const nlohmann::json& report);
// The page: the data embedded as JSON in the page itself, drawn by an inline script.
std::string render_html(const nlohmann::json& data);

}  // namespace replayssm::cli
