// The teeth catalogue's table (names, where each fault can occur) and the math faults' token-step hooks.
#include "replayssm/dtype.hpp"
#include "replayssm/error.hpp"
#include "replayssm/lifecycle/fault.hpp"

namespace replayssm::ref {

namespace {
struct FaultInfo {
  Fault f;
  const char* name;
  std::vector<std::string> targets;
};
const std::vector<FaultInfo>& fault_table() {
  static const std::vector<FaultInfo> t{
      {Fault::None, "none", {"replay", "ring"}},
      {Fault::OffByOneAccepted, "off_by_one_accepted", {"replay"}},
      {Fault::ZeroAcceptedAsOne, "zero_accepted_as_one", {"replay"}},
      {Fault::FullAcceptClamped, "full_accept_clamped", {"replay"}},
      {Fault::GvaModulo, "gva_modulo", {"replay"}},
      {Fault::TransposedLayout, "transposed_layout", {"replay"}},
      {Fault::MissingDecayInReplay, "missing_decay_in_replay", {"replay"}},
      {Fault::StaleCursorOnSlotReuse, "stale_cursor_on_slot_reuse", {"ring"}},
      {Fault::DoubleCursorAdvance, "double_cursor_advance", {"ring"}},
      {Fault::PadRowWritesSlot0, "pad_row_writes_slot0", {"replay"}},
      {Fault::FlushOverwritesLiveRecord, "flush_overwrites_live_record", {"ring"}},
      {Fault::BetaRoundingOnePath, "beta_rounding_one_path", {"replay"}},
      {Fault::EarlyStopCommitsWholeRun, "early_stop_commits_whole_run", {"replay", "ring"}},
      {Fault::CopyDropsRingRecords, "copy_drops_ring_records", {"ring"}},
      {Fault::StopTokenPlusOne, "stop_token_plus_one", {"replay", "ring"}},
      {Fault::GraphTailProcessed, "graph_tail_processed", {"replay"}},
      {Fault::PadSentinelZero, "pad_sentinel_zero", {"replay"}},
      {Fault::PadIndexWraps, "pad_index_wraps", {"replay"}},
      {Fault::CommitWritesReadSlot, "commit_writes_read_slot", {"replay"}},
      {Fault::WidthCappedAt8, "width_capped_at_8", {"replay"}},
      {Fault::DecayWeightsFactored, "decay_weights_factored", {"ring"}},
      {Fault::ConvCommitKeepsWindowTail, "conv_commit_keeps_window_tail", {"replay"}},
      {Fault::ConvWindowNotCopied, "conv_window_not_copied", {"replay"}},
      {Fault::ConvFreshKeepsTenantWindow, "conv_fresh_keeps_tenant_window", {"replay"}},
      {Fault::ConvRollbackToWindow, "conv_rollback_to_window", {"full_state"}},
      {Fault::ConvColumnOffByOne, "conv_column_off_by_one", {"replay", "full_state"}},
      {Fault::ConvPadRowWritesSlot0, "conv_pad_row_writes_slot0", {"replay", "full_state"}},
      {Fault::ConvStaleStateOnFreshPrefill, "conv_stale_state_on_fresh_prefill", {"full_state"}},
      {Fault::CaptureWritesLiveState, "capture_writes_live_state", {"replay"}},
      {Fault::GraphReplaySlotsBaked, "graph_replay_slots_baked", {"replay"}},
      {Fault::GraphReplayLiveRowsBaked, "graph_replay_live_rows_baked", {"replay"}},
      {Fault::GraphReplayAcceptedBaked, "graph_replay_accepted_baked", {"replay"}},
      {Fault::OutputBeforeUpdate, "output_before_update", {"replay"}},
      {Fault::RequestStaysAfterStop, "request_stays_after_stop", {"replay", "ring"}},
      {Fault::ZeroAcceptedWritesDestination, "zero_accepted_writes_destination", {"replay"}},
      {Fault::CommitSpillsIntoGap, "commit_spills_into_gap", {"replay"}},
      {Fault::AllocateZeroesNextSlot, "allocate_zeroes_next_slot", {"replay"}},
      {Fault::PrefillCommittedAtCommit, "prefill_committed_at_commit", {"replay"}},
      {Fault::VerifyScratchInIdleSlot, "verify_scratch_in_idle_slot", {"replay"}},
      {Fault::PadOutputsFromZeroState, "pad_outputs_from_zero_state", {"replay"}},
      {Fault::FullStateCopyOffByOne, "full_state_copy_off_by_one", {"full_state"}},
      {Fault::L2normEpsOutsideSqrt, "l2norm_eps_outside_sqrt", {"replay"}},
      {Fault::DecodePathDrift, "decode_path_drift", {"full_state"}},
  };
  return t;
}

// Value head hv reads key head hv % H (the GGUF pairing) instead of the block mapping hv / G.
struct GvaModuloHook : TokenHook {
  int key_head(const ModelConfig& cfg, int hv) const override { return hv % cfg.H; }
};
// The decay is skipped: alpha = 1 on every channel.
struct MissingDecayHook : TokenHook {
  double alpha(double) const override { return 1.0; }
};
// The output is read before the token's rank-1 write.
struct OutputBeforeUpdateHook : TokenHook {
  bool output_before_update() const override { return true; }
};
// q and k are normalised as x / (sqrt(sum(x^2)) + eps) whatever form is configured (x * rsqrt(sum(x^2) + eps)
// when that one is): eps outside the root. The same value up to rounding wherever sum(x^2) >> eps.
struct EpsOutsideSqrtHook : TokenHook {
  L2Norm l2norm(L2Norm configured) const override {
    if (configured == L2Norm::None) return configured;
    return configured == L2Norm::DivNormPlusEps ? L2Norm::RsqrtMul : L2Norm::DivNormPlusEps;
  }
};
// beta is rounded through bf16 in this path only.
struct BetaRoundingHook : TokenHook {
  double beta(double b) const override { return round_to(DType::BF16, static_cast<float>(b)); }
};
}  // namespace

std::string to_string(Fault f) {
  for (const auto& i : fault_table())
    if (i.f == f) return i.name;
  return "unknown";
}
Fault parse_fault(const std::string& s) {
  std::string known;
  for (const auto& i : fault_table()) {
    if (s == i.name) return i.f;
    known += (known.empty() ? "" : ", ") + std::string(i.name);
  }
  fail("fault", "unknown fault '", s, "' (known: ", known, ")");
}
std::vector<Fault> all_faults() {
  std::vector<Fault> v;
  for (const auto& i : fault_table())
    if (i.f != Fault::None) v.push_back(i.f);
  return v;
}
std::vector<std::string> fault_targets(Fault f) {
  for (const auto& i : fault_table())
    if (i.f == f) return i.targets;
  return {};
}

bool shared_engine_fault(Fault f) { return f == Fault::StopTokenPlusOne; }

bool oracle_shares_fault(Fault f) { return f == Fault::FullStateCopyOffByOne; }

bool sut_engine_fault(Fault f) { return f == Fault::EarlyStopCommitsWholeRun || f == Fault::RequestStaysAfterStop; }

bool self_check_fault(Fault f) { return f == Fault::DecodePathDrift; }

bool graph_replay_fault(Fault f) {
  return f == Fault::GraphReplaySlotsBaked || f == Fault::GraphReplayLiveRowsBaked || f == Fault::GraphReplayAcceptedBaked;
}

bool conv_fault(Fault f) {
  switch (f) {
    case Fault::ConvCommitKeepsWindowTail:
    case Fault::ConvWindowNotCopied:
    case Fault::ConvFreshKeepsTenantWindow:
    case Fault::ConvRollbackToWindow:
    case Fault::ConvColumnOffByOne:
    case Fault::ConvPadRowWritesSlot0:
    case Fault::ConvStaleStateOnFreshPrefill: return true;
    default: return false;
  }
}

std::optional<Reconstruction> fault_reconstruction(Fault f) {
  if (f == Fault::DecayWeightsFactored) return Reconstruction::ClosedForm;
  return std::nullopt;
}

const TokenHook* verify_fault_hook(Fault f) {
  static const OutputBeforeUpdateHook before;
  static const EpsOutsideSqrtHook eps;
  if (f == Fault::L2normEpsOutsideSqrt) return &eps;
  return f == Fault::OutputBeforeUpdate ? &before : nullptr;
}

const TokenHook* fault_hook(Fault f) {
  static const GvaModuloHook gva;
  static const MissingDecayHook decay;
  static const BetaRoundingHook beta;
  static const EpsOutsideSqrtHook eps;
  switch (f) {
    case Fault::L2normEpsOutsideSqrt: return &eps;
    case Fault::GvaModulo: return &gva;
    case Fault::MissingDecayInReplay: return &decay;
    case Fault::BetaRoundingOnePath: return &beta;
    default: return nullptr;
  }
}

}  // namespace replayssm::ref
