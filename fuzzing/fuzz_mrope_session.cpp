// libFuzzer harness: the MRoPE session case parser (reference/mrope/src/mrope_session.cpp: a case's JSON, as an
// mrope.session trace stores it and the mrope_* protocol messages spell it) and the session judge on the
// reference target. A parsed case runs through the oracle only when it stays small (at most 64 commands and
// 4096 tokens in all, head_dim <= 256, cached prefixes below 2^16), so that one input costs milliseconds.
#include "harness.hpp"
#include "replayssm/error.hpp"
#include "replayssm/mrope/mrope_session.hpp"
#include "replayssm/strict_json.hpp"

using namespace replayssm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mrope::SessionCase sc;
  try {
    sc = mrope::SessionCase::from_json(parse_strict_json(fuzzing::text_of(data, size), "case"), "case");
  } catch (const Error&) {
    return 0;
  }
  std::int64_t tokens = 0;
  bool small = sc.commands.size() <= 64 && sc.preset.head_dim <= 256 && sc.q_heads <= 4 && sc.k_heads <= 4;
  for (const auto& c : sc.commands) {
    for (const auto& r : c.rows) tokens += r.tokens < 0 || r.tokens > 4096 ? 4097 : r.tokens;
    small = small && c.cached < (1 << 16);
    for (const auto& s : c.segments)  // the grid's product in double: int64 entries may be anything here
      small = small && s.length < (1 << 16) &&
              static_cast<double>(s.grid[0]) * static_cast<double>(s.grid[1]) * static_cast<double>(s.grid[2]) < 65536.0;
  }
  if (!small || tokens > 4096) return 0;
  try {
    const auto target = mrope::reference_session_target();
    const mrope::SessionReport rep = mrope::run_session(sc, *target);
    // The reference judged against itself: a failure is a judge bug, unless the case itself was refused.
    if (!rep.ok && rep.failure->check != "error") __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
