// replayssm/lifecycle/conv_lifecycle.hpp — the conv state of a layer through a request lifecycle: a slot pool
// of conv states ([C, W-1] per slot, a 4-element gap after each, NaN-poisoned), driven by prefill chunks,
// verify windows with their commits (PAD rows included), slot copies and slot reuse, and judged after every
// command against the full-state design and against the committed history of each request.
//
// This is the conv component on its own: the lifecycle engine (engine.hpp) and the Target interface do not
// carry conv inputs yet, so the component has its own small driver here, with the same rules as the judge
// (judge.hpp): outputs and committed states bit for bit where the arithmetic is the same, every slot outside a
// command's write set and every gap bitwise unchanged, n = 0 leaves the slot's bytes unchanged, PAD rows
// produce zeros and write nothing.
//
// Designs (conv.hpp): FullState keeps the state after every token of a window and commits the one at n;
// Replay keeps the slot's state as the checkpoint plus the window's raw inputs and cuts the window at n. Both
// produce outputs with the same arithmetic (conv_update, kernel-faithful), so outputs and states must agree
// bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "replayssm/recurrence/conv.hpp"

namespace replayssm::ref {

enum class ConvDesign : std::uint8_t { FullState, Replay };

// Slips of conv-state bookkeeping an engine can ship, injectable into a ConvStatePool.
enum class ConvFault : std::uint8_t {
  None,
  RollbackToWindow,           // the commit keeps the state after the whole window T, not the accepted n
  ColumnOffByOne,             // the committed window ends one token early (accepted index n - 1 read as n - 2)
  PadRowWritesSlot0,          // a PAD row (slot -1) is clamped to slot 0 and committed there
  StaleStateOnFreshPrefill,   // a fresh prompt starts from what the slot holds instead of zeros
};
std::string to_string(ConvFault f);
std::vector<ConvFault> all_conv_faults();  // every fault except None
ConvFault parse_conv_fault(const std::string& s);  // "none" or a to_string name; Error("fault") listing them

// One row of a step: slot -1 is a PAD row; T tokens at the next T rows of the packed inputs; accepted n in
// [0, T] (known at commit time).
struct ConvRow {
  std::int32_t slot = -1;
  std::int32_t T = 1;
  std::int32_t accepted = 0;
};

class ConvStatePool {
 public:
  ConvStatePool(ConvConfig cfg, ConvParams params, std::int32_t num_slots, ConvDesign design,
                ConvFault fault = ConvFault::None);
  // A prompt chunk of T tokens x [T, C] into `slot`: fresh = start from zeros. Returns y [T, C].
  std::vector<float> prefill(std::int32_t slot, const std::vector<float>& x, int T, bool fresh);
  // A verify step over packed x [sum T, C]; returns y [sum T, C] (PAD rows: zeros). Error("rows[i].slot")
  // for a slot outside [-1, num_slots) or used twice.
  std::vector<float> verify(const std::vector<ConvRow>& rows, const std::vector<float>& x);
  // Commits the rows of the last verify with their accepted counts (Error("rows[i].accepted") outside [0, T]).
  void commit(const std::vector<ConvRow>& rows);
  void copy_slot(std::int32_t src, std::int32_t dst);
  std::vector<float> state(std::int32_t slot) const;  // [C, W-1]
  const std::vector<float>& pool() const { return pool_; }
  std::int64_t stride() const { return stride_; }

 private:
  ConvConfig cfg_;
  ConvParams params_;
  std::int32_t num_slots_;
  ConvDesign design_;
  ConvFault fault_;
  std::int64_t stride_;
  std::vector<float> pool_;
  struct Pending {
    std::int32_t slot;
    int T;
    std::vector<float> checkpoint, x;        // Replay
    std::vector<std::vector<float>> states;  // FullState
  };
  std::vector<Pending> pending_;
  void write(std::int32_t slot, const std::vector<float>& s);
};

struct ConvCampaignOptions {
  ConvConfig cfg;
  std::uint64_t seed = 1;
  int cases = 100;         // command sequences
  int commands = 40;       // per sequence
  std::int32_t num_slots = 6;
  int max_T = 5;
};
struct ConvCampaignResult {
  bool ok = true;
  int cases_run = 0;
  std::string failure;  // the first failing check: case seed, command index and kind, slot, worst element
};
// Runs `cases` seeded command sequences (admit with a chunked prompt, verify + commit with accepted counts
// favouring 0 and T and PAD rows anywhere, copy to a fresh slot, finish and slot reuse) on a FullState oracle
// and a pool of `design` carrying `fault`, checking after every command as the header describes, plus the
// oracle's committed states against the last W-1 committed raw inputs of each request's history. Stops at the
// first failure.
ConvCampaignResult run_conv_campaign(const ConvCampaignOptions& o, ConvDesign design, ConvFault fault);

}  // namespace replayssm::ref
