// replayssm/engine_level/event.hpp — the request events of the engine-level protocol: what a
// scheduler and a sampler tell a serving engine, with no slot, row order, index tensor or commit timing in
// them (the engine under test decides those). JSON form for replayable dumps; a one-line description.
//
// Tokens are named by seeds: `n` new tokens of seed s are token_inputs(cfg, layer, n, s) for every layer
// (engine.hpp), the layer's post-convolution q, k, v, a, b. The judge hands an engine the tensors, never the
// seeds.
//
// Events (docs/target-protocol.md, "Engine level"):
//   admit       req, prompt tokens (seed), max_new: a new request; its prompt is prefilled from a zero state
//   step        entries (req, T, accepted, eog_at, seed), in sampler order: a request with prompt tokens left
//               prefills a chunk of min(T, left) of them (accepted and eog_at unused); any other request
//               verifies a window of T new tokens and the sampler accepted `accepted` of them (0..T); eog_at
//               (1..accepted, 0 = none) is the position of the end-of-generation token in the accepted run.
//               The engine commits min(accepted, eog_at if set, max_new - generated) tokens; the request
//               finishes when the stop token or the max_new cap is reached (the earlier one wins; tokens
//               after it are never committed)
//   finish      req: the client ends a running request; its slots are free
//   preempt     req: recompute-mode preemption; the slots are free, every committed token is kept
//   resume      req: a preempted request back: every token it had is prefilled again from a zero state
//   fork        req, from: a new request continuing `from` (parallel sampling): same committed tokens, same
//               generated count and max_new; its own slot (copy-on-write: it may share until either writes)
//   prefix_hit  req, from, prompt tokens (seed), max_new: a new request whose prompt starts with every token
//               `from` has committed (a prefix-cache hit on `from`'s current state) followed by `prompt` new
//               tokens to prefill; generated starts at 0
//   snapshot_hit req, from, prompt tokens (seed), max_new: a prefix-cache hit on `from`'s block snapshot
//               (engines with prefix snapshots, EngineOptions::block > 0): a new request whose prompt starts
//               with `from`'s first X committed tokens, X the block boundary of `from`'s latest snapshot (the
//               track step rule, request_engine.hpp), restored from that snapshot, followed by `prompt` new
//               tokens to prefill; generated starts at 0
//   migrate     req: the engine moves a running request to other slots (defragmentation; H16): nothing
//               observable changes. Sent only to engines that migrate (RequestEngine::migrates)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace replayssm::ref::engine_level {

struct StepEntry {
  std::int32_t req = 0;
  std::int32_t T = 1;          // verify window (1 = plain decode) or the largest prefill chunk
  std::int32_t accepted = 0;   // sampler's accepted count, 0..T (verify windows only)
  std::int32_t eog_at = 0;     // 1-based position of the end-of-generation token in the accepted run; 0 = none
  std::uint64_t seed = 0;      // the window's token inputs
};

struct Event {
  enum class Kind : std::uint8_t { Admit, Step, Finish, Preempt, Resume, Fork, PrefixHit, SnapshotHit, Migrate };
  Kind kind = Kind::Step;
  std::int32_t req = 0;      // the request (fork / prefix_hit / snapshot_hit: the new one)
  std::int32_t from = 0;     // fork / prefix_hit / snapshot_hit: the request continued or whose prefix is reused
  std::int32_t prompt = 0;   // admit / prefix_hit / snapshot_hit: new prompt tokens (>= 1)
  std::int32_t max_new = 0;  // admit / prefix_hit / snapshot_hit: generation budget (>= 1)
  std::uint64_t seed = 0;    // admit / prefix_hit / snapshot_hit: prompt token seed
  std::vector<StepEntry> entries;  // step

  nlohmann::json to_json() const;
  // Reads to_json()'s form strictly (every key of the kind's form, no other; integers in range; seeds as
  // full-match decimal text); Error("<field>.<key>") otherwise.
  static Event from_json(const nlohmann::json& j, const std::string& field = "event");
  std::string str() const;
};

const char* kind_name(Event::Kind k);

}  // namespace replayssm::ref::engine_level
