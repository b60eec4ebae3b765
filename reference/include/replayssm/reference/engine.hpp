// replayssm/reference/engine.hpp — the lifecycle model: a small serving engine that runs command sequences
// (prefill chunks, mixed spec/decode steps, early stop, finish, continuation, copy, preemption/resume, slot
// reuse) on a Target, plus the judge that runs the same sequence on the full-state oracle and on an
// implementation under test and compares them after every command.
//
// Targets ("an implementation of the state side of a hybrid model"):
//   full_state — the oracle: verify stores S_1..S_T, commit copies S_n (StateRounding::AtCommit);
//   replay     — ReplaySSM design 1: verify captures raw (k, v, a, b) into a paged payload, commit replays n;
//   ring       — ReplaySSM design 2: checkpoint + per-slot ring of (u, k, g) records with base / write_pos /
//                is_flush cursors (SpecRingGeometry, spec_ring_commit); history is folded on flush steps;
//   cuda       — the GPU kernels (optimized/), registered by the CUDA build when present.
// Every target can carry one injected Fault (kept out of every production path: faults exist only inside
// these test targets and the engine's bookkeeping hook) so the property suite can prove it has teeth.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "replayssm/compare.hpp"
#include "replayssm/config.hpp"
#include "replayssm/reference/gdn.hpp"
#include "replayssm/reference/mtp.hpp"
#include "replayssm/step.hpp"

namespace replayssm::ref {

enum class Fault : std::uint8_t {
  None,
  OffByOneAccepted,           // commit uses n - 1 tokens (reads the previous token's state)
  ZeroAcceptedAsOne,          // n = 0 commits one token
  FullAcceptClamped,          // n = T clamped to T - 1
  GvaModulo,                  // replay maps value head hv to key head hv % H instead of hv / G
  TransposedLayout,           // commit writes the state in the other layout
  MissingDecayInReplay,       // replay skips the decay (alpha = 1)
  StaleCursorOnSlotReuse,     // ring cursors not reset when a slot is (re)allocated
  DoubleCursorAdvance,        // ring write_pos advanced twice by the accepted count
  PadRowWritesSlot0,          // a PAD row (slot -1) is clamped to slot 0 and committed
  FlushOverwritesLiveRecord,  // a flush writes the window at the ring origin instead of after the history
  BetaRoundingOnePath,        // replay rounds beta to the activation dtype, verify does not
  EarlyStopCommitsWholeRun,   // early stop at s commits the whole accepted run n instead of s
  CopyDropsRingRecords,       // slot copy takes the checkpoint only, dropping un-flushed ring records
};
std::string to_string(Fault f);
Fault parse_fault(const std::string& s);  // Error("fault") listing the names
std::vector<Fault> all_faults();          // every fault except None
// Targets on which a fault can occur ("replay", "ring", or both for engine bookkeeping faults).
std::vector<std::string> fault_targets(Fault f);

struct EngineSetup {
  ModelConfig cfg;                  // cfg.num_layers layers
  std::vector<LayerParams> params;  // one per layer
  std::int32_t num_slots = 8;
  std::int64_t slot_stride = 0;     // 0 = HV*K*V; larger leaves a gap that must never be written
  std::int32_t max_T = 6;           // verify window limit (1 + max drafts)
  SpecRingGeometry ring{6, 6};          // spec ring of the ring target (B >= max_T, T = max_T)
  Reconstruction recon = Reconstruction::Serial;
  DType ring_record_dtype = DType::F32;
  std::int32_t page_tokens = 4;     // raw payload page size (rows)
  float poison = 0.0f;              // value the pools start with (NaN by default, see make_setup)

  void validate() const;
  nlohmann::json to_json() const;   // everything but params (regenerated from seed)
};
// A setup for cfg with seeded parameters, NaN-poisoned pools, and ring/page sizes derived from max_T.
EngineSetup make_setup(const ModelConfig& cfg, std::uint64_t seed, std::int32_t num_slots, std::int32_t max_T);

enum class RowKind : std::uint8_t { Verify, Prefill };

// One row of a step as a target sees it. For Prefill rows the whole window is committed at once and
// `fresh` means "start from a zero state, ignore whatever the slot holds".
struct TargetRow {
  BatchRow row;
  RowKind kind = RowKind::Verify;
  bool fresh = false;
};

// Elementwise bound for a non-bit-exact target relative to the largest reference magnitude `scale`:
// allclose(atol = 2^-6 * max(1, scale), rtol = 0) — several bf16 roundings (2^-9 each) made at different
// points by the oracle and the target (docs/numerics.md). Faults cause O(1) differences.
Tolerance storage_tolerance(double scale);

class Target {
 public:
  virtual ~Target() = default;
  virtual std::string name() const = 0;
  // Exact: outputs and committed states must equal the oracle's bit for bit.
  virtual bool bit_exact() const = 0;
  // Bound used when !bit_exact(); `scale` is max|ref| of the compared tensor; `state` says whether a
  // committed state (true) or an output (false) is compared.
  virtual Tolerance tolerance(double scale, bool state) const {
    (void)state;
    return storage_tolerance(scale);
  }
  virtual void setup(const EngineSetup& s) = 0;
  // A slot is (re)allocated to a request: reset per-slot bookkeeping (ring cursors). Pool data stays.
  virtual void allocate(std::int32_t slot) = 0;
  // One mixed step. inputs[l] holds the packed tokens of layer l ([total_tokens] rows). Returns per layer
  // o [total_tokens, HV, V] rounded to the activation dtype; PAD rows' tokens are exactly zero.
  virtual std::vector<std::vector<float>> step(const std::vector<TargetRow>& rows,
                                               const std::vector<SequenceInputs>& inputs) = 0;
  // Commits the Verify rows of the last step with rows[i].row.accepted tokens (Prefill rows are ignored).
  virtual void commit(const std::vector<TargetRow>& rows) = 0;
  virtual void copy_slot(std::int32_t src, std::int32_t dst) = 0;
  // The state a request in `slot` has committed (checkpoint plus any live records), F32 values.
  virtual std::vector<float> committed_state(std::int32_t layer, std::int32_t slot) const = 0;
  // Raw pool storage of one layer (num_slots * stride values), for untouched-slot checks.
  virtual std::vector<float> pool(std::int32_t layer) const = 0;
};

std::unique_ptr<Target> make_target(const std::string& kind, Fault fault = Fault::None);
std::vector<std::string> target_kinds();
// Lets other builds (the CUDA one) add target kinds; returns true.
bool register_target(const std::string& kind, std::function<std::unique_ptr<Target>(Fault)> factory);

// --- commands --------------------------------------------------------------------------------------------
struct RowSpec {
  std::int32_t req = 0;       // request id
  std::int32_t T = 1;         // window (prefill: chunk length)
  std::int32_t accepted = 1;  // n in [0, T] (verify rows)
  std::int32_t stop_at = 0;   // early stop: the stop token is accepted token s (1..n); 0 = none
  std::uint64_t seed = 0;     // input seed for new tokens of this row
};

struct Cmd {
  enum class Kind : std::uint8_t { Admit, Step, Finish, Continue, Copy, Preempt, Resume };
  Kind kind = Kind::Step;
  std::int32_t req = 0;         // Admit/Finish/Continue/Copy(src)/Preempt/Resume
  std::int32_t req2 = 0;        // Copy: destination request id
  std::int32_t slot = 0;        // Admit/Continue/Copy/Resume: slot to allocate
  std::int32_t prompt = 0;      // Admit/Continue: new prompt tokens
  std::uint64_t seed = 0;       // Admit/Continue: prompt input seed
  std::vector<RowSpec> rows;    // Step: rows in batch order
  std::vector<std::int32_t> pad_at;  // Step: PAD rows inserted before these row indices (may repeat)

  nlohmann::json to_json() const;
  static Cmd from_json(const nlohmann::json& j);
  std::string str() const;
};

// The engine: request table, slot use and the accepted-length bookkeeping, driving one Target.
class Engine {
 public:
  Engine(std::unique_ptr<Target> target, const EngineSetup& setup, Fault bookkeeping_fault = Fault::None);

  struct Request {
    std::int32_t slot = kPadSlot;          // kPadSlot when not resident
    bool finished = false;
    std::vector<SequenceInputs> history;   // per layer: committed tokens since the last fresh start
    std::vector<std::int32_t> segments;    // token counts of each committed call since the last fresh start
    std::vector<SequenceInputs> pending;   // per layer: tokens still to prefill
    bool pending_fresh = false;            // the next prefill chunk starts from a zero state
  };

  // Executes one command; returns the outputs of a Step (per layer, packed as the step built them).
  // A command that does not fit the request table (unknown request, slot in use, ...) is Error("cmd").
  std::vector<std::vector<float>> execute(const Cmd& c);
  const std::map<std::int32_t, Request>& requests() const { return requests_; }
  const Target& target() const { return *target_; }
  const EngineSetup& setup() const { return setup_; }
  // The slots the last command was allowed to write (all others must stay bitwise unchanged), and the
  // slots whose bytes must not change either because their commit had n = 0 (for non-ring targets).
  const std::vector<std::int32_t>& last_written() const { return last_written_; }
  const std::vector<std::int32_t>& last_kept() const { return last_kept_; }
  // Token layout of the last step: per row (in batch order, PAD rows included) its offset and length.
  struct PackedRow {
    std::int32_t req;  // -1 for PAD
    std::int32_t offset, T;
  };
  const std::vector<PackedRow>& last_rows() const { return last_rows_; }

  // Recomputes a request's committed state from its history with the plain recurrence (zero start state,
  // rounding to the state dtype at the end of every committed call): the oracle's own self-check.
  std::vector<float> recompute(std::int32_t req, std::int32_t layer) const;

 private:
  std::unique_ptr<Target> target_;
  EngineSetup setup_;
  Fault fault_;
  std::map<std::int32_t, Request> requests_;
  std::vector<std::int32_t> last_written_;
  std::vector<std::int32_t> last_kept_;
  std::vector<PackedRow> last_rows_;
};

// Seeded token inputs of one layer for `T` new tokens (layer-specific stream of `seed`).
SequenceInputs token_inputs(const ModelConfig& cfg, std::int32_t layer, std::int32_t T, std::uint64_t seed);

// The judge: runs every command on the oracle (full_state) and on the implementation under test, then
// checks, after every command: outputs (exact or tolerance per target), every resident request's committed
// state in every layer, the oracle against its own recomputation from history, slots outside the command's
// write set and pool gaps bitwise unchanged, PAD outputs zero, and equal committed token counts.
class Judge {
 public:
  Judge(const EngineSetup& setup, const std::string& target_kind, Fault fault = Fault::None);
  // Executes c on both; returns an empty string when everything agrees, else a description of the first
  // disagreement (which check, request, layer, worst element).
  std::string apply(const Cmd& c);
  const Engine& oracle() const { return oracle_; }
  const Engine& sut() const { return sut_; }
  const std::vector<Cmd>& executed() const { return executed_; }

 private:
  Engine oracle_;
  Engine sut_;
  std::vector<Cmd> executed_;
};

}  // namespace replayssm::ref
