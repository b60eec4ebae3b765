// replayssm/lifecycle/target.hpp — "an implementation of the state side of a hybrid model", as the
// lifecycle engine (engine.hpp) drives it, and the setup every target of one judged run shares.
//
// Targets (make_target):
//   full_state — the oracle: verify stores S_1..S_T, commit copies S_n (batch::verify_full_state/commit_copy);
//   replay     — ReplaySSM design 1: verify captures raw (k, v, a, b) into a paged payload, commit replays n
//                (batch::verify_replay/commit_replay);
//   replay_tf32 — the replay design with TF32 dot-product operands: the tf32 precision tier's own evidence;
//   ring       — ReplaySSM design 2 on a spec ring: checkpoint + per-slot ring of (u, k, g) records with
//                base / write_pos / is_flush cursors (SpecRingGeometry, spec_ring_commit); history is folded
//                on flush steps;
//   cuda, cuda_full_state, cuda_fused — the GPU kernels (conformance/), registered by the CUDA build
//   (cuda_fused defers each commit to the next step: docs/lifecycle.md, "Deferred commits at the kernel level").
// The reference targets can carry one injected Fault (fault.hpp) so the property suite can prove it has teeth.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "replayssm/compare.hpp"
#include "replayssm/config.hpp"
#include "replayssm/lifecycle/conv_component.hpp"
#include "replayssm/lifecycle/fault.hpp"
#include "replayssm/lifecycle/self_check.hpp"
#include "replayssm/recurrence/gdn.hpp"
#include "replayssm/recurrence/inputs.hpp"
#include "replayssm/recurrence/mtp.hpp"
#include "replayssm/step.hpp"
#include "replayssm/tier.hpp"

namespace replayssm::ref {

// How PAD rows (CUDA-graph padding) name their slot in the rows a target receives (docs/target-protocol.md,
// "Graph padding, PAD conventions and out-of-place commits"):
//   MinusOne  — slot -1 (kPadSlot); every slot in [0, num_slots) may hold a request;
//   NullBlock — slot 0, a null block that is never allocated to a request (index <= 0 is padding);
//   PadSlot   — slot num_slots - 1, a dedicated pad slot that is never allocated; a target may run PAD rows as
//               ordinary rows into it (its contents are don't-care) or skip them.
enum class PadConvention : std::uint8_t { MinusOne, NullBlock, PadSlot };
std::string to_string(PadConvention c);
PadConvention parse_pad_convention(const std::string& s, const std::string& field);  // Error(field) listing names
std::vector<PadConvention> all_pad_conventions();

// What one step may mix (docs/target-protocol.md, "What one step may mix"; protocol 1.7, capability and
// setup key `step_mix`). By default everything: rows of any widths, prefill chunks beside verify rows. A kernel
// that takes one width per launch, or runs prefill and verify in different launches, claims the narrowing:
//   one_width     — every row of a step has the same T: live rows (a prefill chunk's T is its chunk length), PAD
//                   rows and graph tail rows alike (a captured bucket is one width; its stale tail comes from
//                   the last captured step of that width);
//   prefill_apart — a step holds prefill chunks or verify rows, never both; PAD rows and graph padding pad
//                   verify steps only (prefill steps run eager and unpadded).
struct StepMix {
  bool one_width = false;
  bool prefill_apart = false;
  bool any() const { return !one_width && !prefill_apart; }
  bool operator==(const StepMix&) const = default;
  nlohmann::json to_json() const;
  // Error("<field>.<key>") for an unknown key or a value that is not true/false.
  static StepMix from_json(const nlohmann::json& j, const std::string& field);
  std::string str() const;  // "any", "one_width", "prefill_apart" or "one_width+prefill_apart"
};
// A mix by name: any, one_width, prefill_apart, or both (one_width+prefill_apart); Error(field) listing them.
StepMix parse_step_mix(const std::string& s, const std::string& field);

struct EngineSetup {
  ModelConfig cfg;                  // cfg.num_layers layers
  std::vector<LayerParams> params;  // one per layer
  std::int32_t num_slots = 8;
  std::int64_t slot_stride = 0;     // 0 = HV*K*V; larger leaves a gap that must never be written
  std::int32_t max_T = 6;           // verify window limit (1 + max drafts)
  SpecRingGeometry spec_ring{6, 6}; // spec ring of the ring target (B >= max_T, T = max_T)
  Reconstruction recon = Reconstruction::Serial;
  DType record_dtype = DType::F32;  // storage dtype of the ring target's u and k records
  std::int32_t page_tokens = 4;     // raw payload page size (rows)
  float poison = 0.0f;              // value the pools start with (NaN by default, see make_setup)
  PadConvention pad_convention = PadConvention::MinusOne;
  // The ranges the engine's token inputs a, b (and, through make_setup, A_log, dt_bias) come from
  // (inputs.hpp): realistic = trained models' large |g| and saturated / near-zero beta.
  GateRange gates = GateRange::Benign;
  // The optional conv component (conv_component.hpp): a conv window per slot and layer next to the recurrent
  // state, driven by Target::conv_step / conv_commit. Absent: targets see the recurrence only, as before.
  std::optional<ConvSetup> conv;
  // What one step may mix (StepMix); the generator forms only such steps, the engine pads them alike and
  // refuses a command that mixes more.
  StepMix step_mix;

  // The slot PAD rows carry under pad_convention (-1, 0 or num_slots - 1).
  std::int32_t pad_sentinel() const;
  // The slot never allocated to a request (0 or num_slots - 1), or kPadSlot under MinusOne.
  std::int32_t reserved_slot() const { return pad_convention == PadConvention::MinusOne ? kPadSlot : pad_sentinel(); }

  void validate() const;
  // Everything but params and poison (the protocol's `setup` object); `pad_convention` is written only when
  // it is not "minus_one" (what every setup before protocol 1.2 meant), `gates` only when it is "realistic"
  // (a target needs neither: it receives the inputs; replaying a case regenerates them from it), `conv`
  // only when the conv component is on (ConvSetup::to_json: its weights are regenerated from its seed),
  // `step_mix` only when it narrows the mix.
  nlohmann::json to_json() const;
  // The inverse of to_json with the given layer parameters and poison value; Error("<field>.<key>") for a
  // missing or malformed key, then validate().
  static EngineSetup from_json(const nlohmann::json& j, std::vector<LayerParams> params, float poison,
                               const std::string& field = "setup");
  PoolGeometry pool_geometry() const { return PoolGeometry{cfg.num_layers, num_slots, slot_stride}; }
  // Rows one step can hold: every slot plus up to 8 PAD rows.
  std::int32_t max_rows() const { return num_slots + 8; }
  // Payload geometry of a ReplaySSM target: max_rows() rows of max_T tokens, twice over (a fresh permuted
  // page table every step).
  PayloadGeometry payload_geometry() const { return PayloadGeometry::sized(page_tokens, max_T, max_rows(), 2); }
};
// A setup for cfg with seeded parameters (from the gates' ranges), NaN-poisoned pools, and ring/page sizes
// derived from max_T.
EngineSetup make_setup(const ModelConfig& cfg, std::uint64_t seed, std::int32_t num_slots, std::int32_t max_T,
                       GateRange gates = GateRange::Benign);

enum class RowKind : std::uint8_t { Verify, Prefill };

// One row of a step as a target sees it. For Prefill rows the whole window is committed at once and
// `fresh` means "start from a zero state, ignore whatever the slot holds".
//
// Slots are written in the setup's PAD convention: a PAD row carries EngineSetup::pad_sentinel() in slot and
// write_slot. graph_tail marks a row of a CUDA-graph style captured batch beyond the live rows (the tail of a
// capacity-sized index buffer): its slot, write_slot, T, kind and accepted are whatever the persistent buffer
// held — the rows of an earlier, larger batch (stale slot ids) or PAD sentinels — and it is a PAD row whatever
// its slot says: no state is read or written for it, and its window's outputs are those of a PAD row. Tail
// rows always follow every live row; their windows lie after the live tokens (dummy tokens).
struct TargetRow {
  BatchRow row;
  RowKind kind = RowKind::Verify;
  bool fresh = false;
  bool graph_tail = false;
};
// The rows with every PAD row (the setup's sentinel) and every graph tail row turned into a kPadSlot row
// (slot and write_slot -1, window kept): the form the batch-level reference takes. `zero_is_pad` also turns
// slot 0 into PAD whatever the convention (the pad_sentinel_zero fault).
std::vector<TargetRow> canonical_rows(const std::vector<TargetRow>& rows, const EngineSetup& s, bool zero_is_pad = false);

// The protocol's JSON form of a batch (docs/target-protocol.md, "Rows of a step"): one object per row with
// slot, write_slot, T, token_offset, accepted, kind ("verify" / "prefill") and fresh. At step time a verify
// row's accepted count is not known yet and is sent as 0 (at_step); a commit sends the rows as given.
nlohmann::json rows_to_json(const std::vector<TargetRow>& rows, bool at_step);
// "" when a batch as a target receives it (rows in the setup's PAD convention) mixes no more than `mix`
// allows, else what it mixes ("row 2 is 4 tokens wide and row 0 1 (one width per step)").
std::string step_mix_excess(const std::vector<TargetRow>& rows, const EngineSetup& s, const StepMix& mix);
// Reads rows_to_json's form back; Error("<field>[i].<key>") for a missing or malformed key.
std::vector<TargetRow> rows_from_json(const nlohmann::json& j, const std::string& field = "rows");

// Elementwise bound for a non-bit-exact target relative to the largest reference magnitude `scale`:
// allclose(atol = 2^-6 * max(1, scale), rtol = 0) — several bf16 roundings (2^-9 each) made at different
// points by the oracle and the target (docs/numerics.md). Faults cause O(1) differences.
Tolerance storage_tolerance(double scale);

class Target {
 public:
  virtual ~Target() = default;
  virtual std::string name() const = 0;
  // The ReplaySSM design it implements (full_state, replay, spec_ring, decode_ring, other). A spec ring
  // may fold its history into the checkpoint on a step whose commit has n = 0, so the judge's "n = 0 leaves
  // the slot's bytes unchanged" rule does not apply to it.
  virtual std::string design() const { return "other"; }
  // Exact: outputs and committed states must equal the oracle's bit for bit.
  virtual bool bit_exact() const = 0;
  // Bound used when !bit_exact(); `term_scale` holds, per compared element, the magnitude of the terms that
  // produce it (term_scales.hpp: no floor of 1, a small tensor judged at its own size); `state` says whether a
  // committed state (true) or an output (false) is compared.
  virtual Tolerance tolerance(const std::vector<double>& term_scale, bool state) const {
    (void)state;
    return storage_tolerance_scaled(term_scale);
  }
  // Whether PAD rows' outputs are claimed to be exact zeros (the project's own targets write zeros). The
  // judge checks the claim; without it PAD outputs are don't-care (docs/target-protocol.md, "PAD rows").
  virtual bool pad_outputs_zero() const { return true; }
  // What the generator may produce for this target (asked before setup): "" when a campaign with this
  // model config and window limit is covered, else why not (an implementation's capabilities); and whether
  // copy_slot is implemented (otherwise campaigns generate no copies and report them as not covered).
  virtual std::string unsupported(const ModelConfig& cfg, std::int32_t max_T) const {
    (void)cfg;
    (void)max_T;
    return {};
  }
  virtual bool implements_copy() const { return true; }
  // The PAD conventions the target follows (the generator draws a case's convention among them; the others
  // are not covered) and whether it handles captured batches with a graph tail (TargetRow::graph_tail).
  virtual std::vector<PadConvention> pad_conventions() const { return {PadConvention::MinusOne}; }
  virtual bool graph_padding() const { return false; }
  // Whether verify rows may commit out of place (write_slot != slot, the read slot left bitwise untouched).
  virtual bool out_of_place_commit() const { return false; }
  // What one step may mix for this target (StepMix; default: everything). Campaigns run its cases under this
  // mix (EngineSetup::step_mix) and traces that mix more are not covered.
  virtual StepMix step_mix() const { return {}; }
  // What the target claims about its own paths (SelfClaim, self_check.hpp; protocol 1.8): the self checks it
  // claims bit-exact and the precision its paths may differ at. Default: none exact, fp32.
  virtual SelfClaim self_claim() const { return {}; }

  // --- the optional conv component (conv_component.hpp; EngineSetup::conv) -------------------------------
  // Whether the target keeps a conv window per slot and layer. Only then may a setup carry `conv`; the
  // engine then calls conv_step right after step (same rows, same inputs: the raw conv inputs are the
  // tokens' q | k | v, conv_raw_inputs) and conv_commit right after commit, and copy_slot must carry the
  // window too. Windows of fresh prefill rows start from zeros; prefill rows commit all T in conv_step;
  // verify rows commit rows[i].row.accepted columns in conv_commit (n = 0: the slot's bytes stay); PAD and
  // graph tail rows read and write nothing and their outputs are zeros.
  virtual bool conv_state() const { return false; }
  // Per layer y [total_tokens, C] rounded to the activation dtype (conv.hpp).
  virtual std::vector<std::vector<float>> conv_step(const std::vector<TargetRow>& rows,
                                                    const std::vector<SequenceInputs>& inputs);
  virtual void conv_commit(const std::vector<TargetRow>& rows);
  // The committed window of `slot` ([C, W-1], F32 values) and the raw conv pool of a layer (num_slots *
  // conv_stride values, conv_stride = C*(W-1) + 4: a gap after every slot), for untouched-slot checks.
  virtual std::vector<float> conv_committed_state(std::int32_t layer, std::int32_t slot) const;
  virtual std::vector<float> conv_pool(std::int32_t layer) const;

  // Whether the target takes capture() while requests are live (docs/lifecycle.md, "Generation and shrinking"); the
  // generator sends no capture to a target that does not (its report says "not covered").
  virtual bool captures() const { return false; }
  // Captures a new CUDA-graph bucket: a step of `rows` rows of `T` tokens each (1 <= rows <= max_rows(),
  // 1 <= T <= max_T), warmed up and recorded on dummy inputs, using only PAD rows or the target's own scratch.
  // Requests are live: no slot, gap or committed state may change (the pad_slot convention's pad slot
  // excepted), and the next step and commit behave as if it had not happened. Default: Error("capture").
  virtual void capture(std::int32_t rows, std::int32_t T);
  // Whether the target is told which steps replay a captured bucket (protocol 1.9, docs/target-protocol.md
  // "Captured graphs replayed"); the generator replays captured buckets only for a target that claims it (and
  // captures, with graph padding). replaying(rows, T) comes right before the step() and again right before the
  // commit() of a step that replays the bucket capture(rows, T) recorded earlier in the case: that step has
  // exactly `rows` rows, every one T tokens wide, live rows first. What the target may keep from the capture is
  // the bucket's shape and its own buffers: slots, write slots, accepted counts, live_rows and inputs are the
  // step's and commit's own. Default: nothing to do.
  virtual bool graph_replay() const { return false; }
  virtual void replaying(std::int32_t rows, std::int32_t T) {
    (void)rows;
    (void)T;
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
// Adds a family of kinds named by a prefix ("exec:" + command): make_target("exec:CMD") calls the factory
// with "CMD". Returns true.
bool register_target_prefix(const std::string& prefix,
                            std::function<std::unique_ptr<Target>(const std::string& rest, Fault)> factory);

}  // namespace replayssm::ref
