// replayssm/engine_level/request_engine.hpp — the engine-level interface: a serving engine's state
// side driven by request events (event.hpp) instead of kernel batches. The implementation under test owns
// everything the kernel-level Target (target.hpp) is handed ready-made: which slot a request lives in, the
// row order and index tensors of a step, trimming accepted runs at the stop token and the max_new cap, when
// a commit lands (in the step, or at the start of the next one), copy-on-write on forks and prefix-cache
// hits, and its own request table. The judge (judge.hpp) checks it against per-request truth that knows no
// slots (truth.hpp).
//
// Shapes: as in gdn.hpp. A state is HV*K*V values in cfg.layout; an output block is [n, HV, V] for the n
// tokens a step entry processed (its prefill chunk, or its verify window of T tokens), rounded to the
// activation dtype. The pool of one layer is num_slots * stride values (stride = slot_stride or HV*K*V); the
// stride - HV*K*V values after every slot are a gap that must never be written.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "replayssm/engine_level/event.hpp"
#include "replayssm/lifecycle/target.hpp"

namespace replayssm::ref::engine_level {

// When a verify window's accepted tokens reach the state: in the step itself (TokenSpeed: nothing survives
// a round), or at the start of the next step (vLLM: the commit kernel runs before the next verify). Prefill
// chunks are committed by their step in both modes. Both must give the same observable states.
enum class CommitMode : std::uint8_t { SameIteration, NextStep };
// Where a commit writes: over the slot it read (in place), or into the other buffer of a ping-pong pair
// whose buffer index flips on every commit that writes (out of place: read slot != write slot).
enum class Buffering : std::uint8_t { InPlace, Double };
std::string to_string(CommitMode m);  // "same_iteration", "next_step"
std::string to_string(Buffering b);   // "in_place", "double"
CommitMode parse_commit_mode(const std::string& s, const std::string& field = "commit");
Buffering parse_buffering(const std::string& s, const std::string& field = "buffers");

// Conventions the project's reference engine follows (an external engine may ignore them) and the one
// bound every engine must meet: at most max_live requests hold slots at once (the generator never asks
// for more). base.num_slots is the pool an engine may use (>= 2 * max_live + 2 from make_engine_level_setup,
// max_live more with prefix snapshots).
//
// Prefix snapshots (block > 0; hazards H9, H10 of the hazard list): the prefix cache keeps, per running
// request, a snapshot of its committed state at a block boundary, taken by the track step rule: when a
// committed call (a prefill chunk or a verify commit) takes the request's committed length from c0 to c1
// with floor(c1 / block) > floor(c0 / block), the snapshot becomes the state after exactly
// X = floor(c1 / block) * block tokens (the last boundary crossed, not c1: SGLang's track step; rejected
// drafts never count). A snapshot is a full state in a slot of the request's own (a ring engine folds its
// live records into it: the forced flush), it goes when the request stops running or is re-prefilled from
// zero, and a fork or hit starts without one. `snapshot_hit` restores it into a private slot (copy-on-write:
// a ring slot restored from a snapshot starts with an empty ring). The snapshot is written in the step
// whose commit crosses the boundary, in either commit mode.
struct EngineOptions {
  std::int32_t max_live = 4;
  CommitMode commit = CommitMode::SameIteration;
  Buffering buffers = Buffering::InPlace;
  std::int32_t block = 0;  // prefix-cache block in tokens (0: no snapshots; JSON key "block" only when > 0)
  nlohmann::json to_json() const;
  static EngineOptions from_json(const nlohmann::json& j, const std::string& field = "options");
};

struct EngineLevelSetup {
  EngineSetup base;  // cfg, params, num_slots, slot_stride, max_T, page_tokens, poison (ring fields unused)
  EngineOptions options;
  void validate() const;  // base.validate(), max_live >= 1, a pool of num_slots slots can hold it
};
// make_setup(cfg, seed, 2 * max_live + 2, max_T) with the given options.
EngineLevelSetup make_engine_level_setup(const ModelConfig& cfg, std::uint64_t seed, std::int32_t max_live,
                                         std::int32_t max_T, EngineOptions options);

enum class Status : std::uint8_t { Running, Finished, Preempted };
std::string to_string(Status s);

// One request as an engine accounts for it.
struct RequestStatus {
  Status status = Status::Running;
  std::int32_t committed = 0;  // tokens in its logical committed state since its last fresh start (a pending
                               // deferred commit counts); a prefix hit starts at the reused prefix's length
  std::int32_t to_prefill = 0; // prompt (or re-prefill) tokens not yet committed
  std::int32_t generated = 0;  // tokens committed by verify windows since admission (max_new caps it)
  bool operator==(const RequestStatus&) const = default;
};

// The engine-level teeth catalogue: slips only an engine that owns its bookkeeping can make (docs/lifecycle.md,
// "Engine level").
enum class EngineFault : std::uint8_t {
  None,
  AcceptedByRowPosition,       // accepted counts read by batch row position (sampler order) after the engine
                               // reordered/condensed its rows, instead of by request (H7, H8)
  DeferredCommitAfterFree,     // a deferred commit keyed by slot lands after its request ended and the slot
                               // was freed (and possibly reallocated) (H12)
  TenantInheritsBufferIndex,   // a reallocated ping-pong pair keeps the previous tenant's buffer index; the
                               // copy path writes buffer 0 as for a fresh pair (H12)
  PrefixHitSharesSlot,         // a fork / prefix-cache hit maps the new request onto the donor's slot without
                               // copy-on-write (H9, H10)
  PendingCommitLostOnPreempt,  // preemption drops a deferred commit's tokens instead of keeping them
  StopTokenIgnoredAtCap,       // stop token and max_new cap in one accepted run: the cap alone trims, tokens
                               // after the stop token are committed (H11)
  SnapshotAtRunEnd,            // reference engine: the track step snapshots the state after the whole committed
                               // run instead of at the block boundary it crossed (H10)
  SnapshotCountsRejectedDrafts,// reference engine: the crossing is decided on the verify window (drafts counted
                               // as computed): a boundary only rejected drafts reach gets a snapshot of
                               // uncommitted tokens (H9)
  SnapshotWithoutFlush,        // ring engine: the snapshot copies the checkpoint and drops the live ring
                               // records (no forced flush) (H10)
  CowKeepsWritePos,            // ring engine: a snapshot hit restores the snapshot into a private slot but keeps
                               // the donor's cursors and records, as a fork would (H9, H10)
  MigrationDropsRingRecords,   // ring engine: a migration moves the checkpoint and resets the cursors, losing
                               // the live records (H16)
};
std::string to_string(EngineFault f);
EngineFault parse_engine_fault(const std::string& s);  // Error("fault") listing the names
std::vector<EngineFault> all_engine_faults();          // every fault except None
// The hazard ids of peers-and-hazards section 3 and the engine options under which the fault can act
// ("" = any), for reports and docs.
std::string engine_fault_scope(EngineFault f);
// The faults the spec-ring engine carries (None, snapshot_without_flush, cow_keeps_write_pos,
// migration_drops_ring_records); `make_request_engine("ring", f)` refuses the others, naming `fault`.
bool ring_engine_has_fault(EngineFault f);

class RequestEngine {
 public:
  virtual ~RequestEngine() = default;
  virtual std::string name() const = 0;
  virtual bool bit_exact() const = 0;
  // Bound when !bit_exact(): scale = max|ref| of the compared tensor.
  virtual Tolerance tolerance(double scale, bool state) const {
    (void)state;
    return storage_tolerance(scale);
  }
  virtual void setup(const EngineLevelSetup& s) = 0;

  // Events. Errors (invalid for this engine) are replayssm::Error naming the field.
  virtual void admit(std::int32_t req, const std::vector<SequenceInputs>& prompt, std::int32_t max_new) = 0;
  virtual void prefix_hit(std::int32_t req, std::int32_t from, const std::vector<SequenceInputs>& prompt,
                          std::int32_t max_new) = 0;
  virtual void fork(std::int32_t req, std::int32_t from) = 0;
  // Prefix snapshots (EngineOptions::block > 0). An engine that keeps them says so; the judge then sends
  // snapshot_hit events and checks snapshot() after every event. Defaults: no snapshots (Error("snapshot")).
  virtual bool prefix_snapshots() const { return false; }
  virtual void snapshot_hit(std::int32_t req, std::int32_t from, const std::vector<SequenceInputs>& prompt,
                            std::int32_t max_new);
  // The boundary X of a running request's latest snapshot (0: none yet) and its state in `layer` (a query).
  virtual std::int32_t snapshot_tokens(std::int32_t req) const;
  virtual std::vector<float> snapshot_state(std::int32_t req, std::int32_t layer) const;
  // Moves a running request to other slots (defragmentation, hazard H16): every persistent part of its
  // state goes along (checkpoint, ring records and cursors, snapshot), no scratch. An engine that does it
  // says so; the judge then sends migrate events. Default: Error("migrate").
  virtual bool migrates() const { return false; }
  virtual void migrate(std::int32_t req);
  // windows[i][l]: entry i's verify window inputs of layer l (T tokens), or an empty (T = 0) input for an
  // entry of a request that still prefills (the engine holds its prompt). Returns [entry][layer] outputs.
  virtual std::vector<std::vector<std::vector<float>>> step(const std::vector<StepEntry>& entries,
                                                            const std::vector<std::vector<SequenceInputs>>& windows) = 0;
  virtual void finish(std::int32_t req) = 0;
  virtual void preempt(std::int32_t req) = 0;
  virtual void resume(std::int32_t req) = 0;

  // Queries (no effect on the engine's state: a deferred commit stays deferred).
  virtual std::map<std::int32_t, RequestStatus> requests() const = 0;
  // The logical committed state of a running request (pending deferred commit included).
  virtual std::vector<float> committed_state(std::int32_t req, std::int32_t layer) const = 0;
  // Physical slots of every running request (e.g. both buffers of a ping-pong pair). Slots of no running
  // request must stay bitwise unchanged; two requests may share a slot only while their states are equal.
  virtual std::map<std::int32_t, std::vector<std::int32_t>> slot_map() const = 0;
  virtual std::vector<float> pool(std::int32_t layer) const = 0;
};

// Engine-level implementations by name: "reference" (the project's engine over the batch-level raw-payload
// replay reference, batch.hpp), "ring" (the spec-ring design: checkpoint, ring of corrected-update records and
// cursors per slot, spec_ring.hpp; in-place slots only), optionally with a catalogue fault (a fault of the
// other engine's design leaves an engine unchanged). Error("target") for an unknown name.
// Other builds add families of engines named by a prefix ("exec:" + command, conformance/exec/engine_exec.hpp):
// make_request_engine("exec:CMD") calls the factory with "CMD". Returns true.
std::unique_ptr<RequestEngine> make_request_engine(const std::string& name, EngineFault fault = EngineFault::None);
std::vector<std::string> request_engine_kinds();
bool register_request_engine_prefix(const std::string& prefix,
                                    std::function<std::unique_ptr<RequestEngine>(const std::string& rest)> factory);

}  // namespace replayssm::ref::engine_level
