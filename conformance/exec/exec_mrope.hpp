// MRoPE positions over the target protocol (version 1.10, docs/target-protocol.md "MRoPE positions (1.10)"):
// the session commands mrope_setup, mrope_admit, mrope_step, mrope_accept and mrope_release sent to an
// implementation in its own process, and the strict parsing of mrope_step's answer. An answer must hold exactly
// positions I64 [3, N], index I64 [N], q_rot F32 [N, q_heads, head_dim] and k_rot F32 [N, k_heads, head_dim];
// anything else is Error("target.mrope_step.<name>").
#pragma once

#include <memory>
#include <string>

#include "replayssm/frame.hpp"
#include "replayssm/mrope/mrope_session.hpp"

namespace replayssm::exec {

// The answer of mrope_step for a step of N tokens (Error("target.mrope_step.<name>") for a missing, extra or
// misshapen tensor).
mrope::StepAnswer parse_mrope_step_answer(const Frame& a, std::int64_t N, std::int64_t q_heads, std::int64_t k_heads,
                                          std::int64_t head_dim);

// The session target of the implementation behind COMMAND (its live connection). Error("target.mrope") when it
// does not claim `mrope` or answers a protocol before 1.10.
std::unique_ptr<mrope::SessionTarget> exec_session_target(const std::string& command);

}  // namespace replayssm::exec
