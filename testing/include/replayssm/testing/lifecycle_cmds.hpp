// Test helper: lifecycle commands written by hand (reference/lifecycle/include/replayssm/lifecycle/command.hpp),
// with seeds derived from the request and the window so that two tests writing the same command get the same
// tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "replayssm/lifecycle/command.hpp"

namespace replayssm::testing {

inline ref::Cmd admit(int req, int slot, int prompt) {
  ref::Cmd c;
  c.kind = ref::Cmd::Kind::Admit;
  c.req = req;
  c.slot = slot;
  c.prompt = prompt;
  c.seed = 100 + static_cast<std::uint64_t>(req);
  return c;
}
// A row of request `req` with a window of T tokens, n accepted, an early stop at accepted token stop_at (0: none).
inline ref::RowSpec row(int req, int T, int accepted = 0, int stop_at = 0) {
  ref::RowSpec r;
  r.req = req;
  r.T = T;
  r.accepted = accepted;
  r.stop_at = stop_at;
  r.seed = 7 + static_cast<std::uint64_t>(req) * 31 + static_cast<std::uint64_t>(T);
  return r;
}
// A step of these rows, PAD rows before the given row indices, run as a captured batch of `graph` rows (0: eager).
inline ref::Cmd step(std::vector<ref::RowSpec> rows, std::vector<std::int32_t> pad_at = {}, std::int32_t graph = 0,
                     bool stale_tail = false) {
  ref::Cmd c;
  c.kind = ref::Cmd::Kind::Step;
  c.rows = std::move(rows);
  c.pad_at = std::move(pad_at);
  c.graph = graph;
  c.stale_tail = stale_tail;
  return c;
}

}  // namespace replayssm::testing
