// replayssm/lifecycle/fault.hpp — the teeth catalogue: slips an engine or a kernel could ship, each injectable
// into a reference target (or into the engine's accepted-length bookkeeping) so that the property suite can
// prove it catches every one of them (property_tests/teeth_test.cpp, docs/lifecycle.md).
//
// Faults live only inside the reference targets and the engine's bookkeeping hook; no production path
// reads them. Math faults enter through the token step's hook (fault_hook, gdn.hpp TokenHook), bookkeeping
// faults by changing the descriptors a target hands the batch-level reference (batch.hpp): neither copies
// the math.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "replayssm/recurrence/gdn.hpp"
#include "replayssm/recurrence/mtp.hpp"
#include "replayssm/tier.hpp"

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
  StopTokenPlusOne,           // shared engine bookkeeping: an early stop at s commits s + 1 tokens (the token
                              // after the end-of-generation token stays in the state), on the oracle's side too
  GraphTailProcessed,         // a captured batch runs over its whole capacity: graph tail rows holding stale slot ids
                              // of an earlier, larger batch are verified and committed into those slots
  PadSentinelZero,            // slot 0 is taken for the PAD sentinel whatever the convention: under -1, the live
                              // request in slot 0 is skipped (no outputs, no commit)
  PadIndexWraps,              // a PAD index -1 wraps to the last pool slot (pool[-1]) and is committed there
  CommitWritesReadSlot,       // an out-of-place commit also stores the new state into the read slot
  WidthCappedAt8,             // a verify kernel compiled for at most 8 tokens per window (kFaultWidthCap): the
                              // tokens of a wider window beyond the 8th are neither verified (their outputs stay
                              // zero) nor captured, and the commit caps the accepted count at 8
  DecayWeightsFactored,       // the closed-form ring reconstruction forms each decay weight exp(G_m - G_j) as
                              // exp(G_m) * exp(-G_j): equal in exact arithmetic and within rounding for moderate
                              // gates, inf * 0 = NaN once a history's cumulative log-decay passes ~ -88 (the
                              // large |g| of trained models); acts with Reconstruction::ClosedForm only
  // Conv component faults (conv_component.hpp; they act only in cases whose setup carries `conv`):
  ConvCommitKeepsWindowTail,  // the conv commit keeps the last W - 1 columns of the whole verify window, as if
                              // every draft were accepted, instead of the columns ending at accepted token n
  ConvWindowNotCopied,        // a slot copy moves the recurrent state but not the conv window
  ConvFreshKeepsTenantWindow, // a fresh prefill starts its conv from the window the slot holds (a finished or
                              // preempted tenant's columns, or poison) instead of zeros
  ConvRollbackToWindow,       // the full-state conv design's commit keeps the window state after all T tokens
                              // (no rollback to the accepted n): conv_commit_keeps_window_tail in that design
  ConvColumnOffByOne,         // the committed conv window ends one token early (accepted index n - 1 read as
                              // n - 2): the columns of tokens 1..n-1 are kept, n = 1 keeps the checkpoint
  ConvPadRowWritesSlot0,      // a PAD (or graph tail) verify row's conv window is clamped to slot 0: read from
                              // slot 0 and, at the commit, written there
  ConvStaleStateOnFreshPrefill,  // the full-state conv design's fresh prefill starts from what the slot holds
                                 // instead of zeros: conv_fresh_keeps_tenant_window in that design
  CaptureWritesLiveState,     // capturing a new CUDA-graph bucket while requests are live warms the step up on the
                              // persistent index buffer's current contents (the slots of the last step) instead of
                              // PAD rows, and the warm-up commits its dummy window into those live slots
  // Graph replay faults (protocol 1.9): a replayed bucket keeps a value of its first replay after the capture
  // (the launch a lazily captured graph records, or a persistent buffer filled only when the bucket is new)
  // instead of reading this replay's. Only a later replay of the same bucket with other values shows them.
  GraphReplaySlotsBaked,      // slot and write_slot of every row (and which rows are PAD) as at the first replay
  GraphReplayLiveRowsBaked,   // the live row count as at the first replay: rows beyond it run as graph tail (PAD)
  GraphReplayAcceptedBaked,   // the commit's accepted counts as at the first replay's commit (row by row)
  // Faults each of which only one check of the judge catches at its call (judge.hpp, Check; the judge's own
  // teeth, property_tests/judge_teeth_test.cpp):
  OutputBeforeUpdate,         // verify reads each token's output from the state before the token's rank-1
                              // write (decayed only): outputs wrong, committed states right      [Outputs]
  RequestStaysAfterStop,      // engine bookkeeping: a request whose stop token was accepted keeps its slot and
                              // stays running (its commit is trimmed right)                      [Requests]
  ZeroAcceptedWritesDestination,  // an out-of-place commit with n = 0 still copies the checkpoint into its
                                  // destination slot, which must keep its bytes                   [KeptAtZero]
  CommitSpillsIntoGap,        // the commit writes one element past the state, into the slot's gap  [Gaps]
  AllocateZeroesNextSlot,     // allocating slot s resets slot s + 1 (mod num_slots) instead: zeros there   [Untouched]
  PrefillCommittedAtCommit,   // prefill chunks are committed by commit() instead of by the step    [StatesAfterStep]
  VerifyScratchInIdleSlot,    // the step uses a never-allocated slot as scratch and restores its bytes at the
                              // commit                                                              [UntouchedAfterStep]
  PadOutputsFromZeroState,    // PAD rows' outputs are computed from a zero state instead of being zeros, on a
                              // target that claims pad_outputs_zero                                [PadZeros]
  FullStateCopyOffByOne,      // the full-state design's commit copies S_{n-1}, in the oracle and the target alike:
                              // only the oracle's self-check sees it                               [OracleSelfCheck]
  L2normEpsOutsideSqrt,       // q and k normalised as x / (sqrt(sum(x^2)) + eps) under a configuration that
                              // names another form: equal up to rounding unless sum(x^2) is near eps, so only
                              // inputs at checkpoint sizes (q, k rows of norm ~1e-3) show it at a tolerance tier
  DecodePathDrift,            // a separate T = 1 decode kernel beside the verify kernel, its state update (1 - 2^-10)
                              // of the verify kernel's (a decay computed another way): each single-token commit
                              // lands about 1e-3 of the state's scale away, inside the bf16 tier the faulty
                              // full_state target then claims (kDecodeDriftTier)                  [SelfConsistency]
};
// The relative drift of DecodePathDrift's single-token commits, and the tier its target claims against the oracle.
inline constexpr double kDecodeDrift = 0x1p-10;
inline constexpr Tier kDecodeDriftTier = Tier::Bf16;
// The compiled window of WidthCappedAt8 (1 + 7 drafts): only windows of T > 8 (widths 9..12 and up) see it.
inline constexpr std::int32_t kFaultWidthCap = 8;
std::string to_string(Fault f);
Fault parse_fault(const std::string& s);  // Error("fault") listing the names
std::vector<Fault> all_faults();          // every fault except None
// Targets on which a fault can occur ("replay", "ring", or both for engine bookkeeping faults; "full_state" for
// the conv faults of the full-state conv design, which the full_state target carries while the oracle does not).
std::vector<std::string> fault_targets(Fault f);
// Faults of the engine's bookkeeping that the oracle's engine shares (a slip in the one Engine both sides
// run): only the independent bookkeeping model of the fuzz generator can see them.
bool shared_engine_fault(Fault f);
// Faults the oracle's full_state target carries too (FullStateCopyOffByOne): the judge injects them into both.
bool oracle_shares_fault(Fault f);
// Faults of the implementation's engine bookkeeping (the sut Engine), not of its target: EarlyStopCommitsWholeRun,
// RequestStaysAfterStop.
bool sut_engine_fault(Fault f);
// The verify-path perturbation of a fault (OutputBeforeUpdate), nullptr for every other fault.
const TokenHook* verify_fault_hook(Fault f);
// Faults only a self check can see (Check::SelfConsistency: DecodePathDrift): inside the tier the target claims,
// so no comparison with the oracle (a campaign's, or a trace's replay) shows them.
bool self_check_fault(Fault f);
// Faults of the conv component: only cases with EngineSetup::conv can show them.
bool conv_fault(Fault f);
// Faults of a replayed captured bucket (GraphReplay*): only a target claiming graph replay, sent replays, shows them.
bool graph_replay_fault(Fault f);
// The ring reconstruction a fault lives in (decay_weights_factored: closed_form), or none: a campaign or
// property hunting the fault must run its ring target with it.
std::optional<Reconstruction> fault_reconstruction(Fault f);

// The token-step perturbation of a math fault (GvaModulo, MissingDecayInReplay, BetaRoundingOnePath);
// nullptr for every other fault.
const TokenHook* fault_hook(Fault f);

}  // namespace replayssm::ref
