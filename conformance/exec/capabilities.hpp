// The capabilities of an implementation behind the target protocol (docs/target-protocol.md, "Capabilities"):
// the protocol's version constants, the hello answer's "capabilities" object parsed strictly, and what a
// configuration, a conv fixture or a fixture op needs of it. No process is involved here.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "replayssm/config.hpp"
#include "replayssm/lifecycle/target.hpp"
#include "replayssm/tier.hpp"

namespace replayssm::exec {

// 1.1 added the `fixture` command (the fixture-op capability).
// 1.2 added graph padding, PAD conventions and out-of-place commits.
// 1.3 added the conv fixture ops (conv.prefill, conv.update, conv.commit) to `fixture_ops`.
// 1.4 added the `capture` command (the `capture` capability: a CUDA-graph bucket captured while requests are live).
// 1.5 added the lifecycle's conv component (the `conv_state` capability; exec_conv.hpp).
// 1.6 added l2norm forms named by their formula (and the forms div_norm_plus_eps, div_max_norm_eps) in `l2norms`,
//     and the value "checkpoint" of setup.gates.
// 1.7 added the `step_mix` capability and setup key (what one step may mix: one width, prefill apart).
// 1.8 added the `self_check` capability (what an implementation claims about its own paths: self_check.hpp).
// 1.9 added the `graph_replay` capability and the `replay` field of step and commit (a captured bucket replayed).
// 1.10 added MRoPE positions: the `mrope` capability, the mrope_* commands (exec_mrope.hpp) and the fixture op
//      mrope.rotary.
// 1.11 added the tree fixture ops (tree.verify, tree.commit, tree.conv_update, tree.conv_commit) to `fixture_ops`.
inline constexpr int kProtocolMajor = 1, kProtocolMinor = 11;
// The protocol minor version that added the `capture` command; an implementation answering less is never sent it.
inline constexpr int kCaptureMinor = 4;
// The protocol minor version that added the conv component (`conv_state`); an implementation answering less is
// never sent a setup with `conv` nor a conv command.
inline constexpr int kConvStateMinor = 5;
// The protocol minor version that added l2norm forms by formula and the forms beyond rsqrt_mul, div_sqrt and none;
// an implementation answering less may not claim them, and its setups say "realistic" for checkpoint cases.
inline constexpr int kL2normFormulaMinor = 6;
// The protocol minor version that added `step_mix`; an implementation answering less is sent mixed steps whatever
// it claims (and is never sent setup.step_mix).
inline constexpr int kStepMixMinor = 7;
// The protocol minor version that added `self_check`; an implementation answering less is judged at the default
// claim (no check exact, fp32). Self checks themselves are ordinary calls, sent to every target that copies slots.
inline constexpr int kSelfCheckMinor = 8;
// The protocol minor version that added `graph_replay` (the `replay` field of step and commit); an implementation
// answering less is never sent a replay, whatever it claims.
inline constexpr int kGraphReplayMinor = 9;
// The protocol minor version that added MRoPE positions (`mrope`, the mrope_* commands, fixture op mrope.rotary);
// an implementation answering less is never sent them, whatever it claims.
inline constexpr int kMropeMinor = 10;
// The protocol minor version that added the tree fixture ops; an implementation answering less is never sent them.
inline constexpr int kTreeFixtureMinor = 11;
inline constexpr const char* kProtocolName = "replayssm.target";

// What an implementation says it can do (the "capabilities" object of its hello answer).
struct Capabilities {
  std::string name;                                        // the implementation's own name
  std::vector<Op> ops{Op::GDN, Op::KDA};
  std::vector<DType> act_dtypes{DType::F32, DType::BF16};
  std::vector<DType> state_dtypes{DType::F32, DType::BF16};
  std::vector<StateLayout> layouts{StateLayout::VK, StateLayout::KV};
  std::vector<L2Norm> l2norms{L2Norm::RsqrtMul, L2Norm::DivSqrt};
  std::vector<KdaGate> kda_gates{KdaGate::Softplus, KdaGate::LowerBoundSigmoid};
  bool round_beta_to_act = true;                           // supports configs that round beta through bf16
  std::vector<int> gva_ratios;                             // empty: any HV / H
  std::vector<int> K, V;                                   // empty: any
  int max_T = 64;
  int max_layers = 1 << 20;
  bool copy_slot = true;
  bool bit_exact = false;                                  // claims bit-exact agreement with the oracle
  Tier tier = Tier::Fp32;                                  // the precision tier it claims (tier.hpp)
  bool pad_outputs_zero = false;                           // claims PAD rows' outputs are exact zeros
  std::string design = "other";                            // full_state, replay, spec_ring, decode_ring, other
  std::vector<std::string> fixture_ops;                    // fixture ops it implements (docs/target-protocol.md):
                                                           // a subset of kFixtureOps, no op twice
  int protocol_minor = kProtocolMinor;                     // the minor version the implementation answered (not
                                                           // part of the capabilities object; `fixture` needs >= 1)
  // Protocol 1.2 (docs/target-protocol.md, "Graph padding, PAD conventions and out-of-place commits"): the PAD conventions it follows
  // and whether it handles captured batches whose rows beyond live_rows are a stale or PAD graph tail.
  std::vector<ref::PadConvention> pad_conventions{ref::PadConvention::MinusOne};
  bool graph_padding = false;
  bool out_of_place_commit = false;  // verify rows with write_slot != slot (the read slot left untouched)
  // Protocol 1.4: takes `capture` (a new CUDA-graph bucket captured while requests are live). Only honoured
  // for an implementation answering 1.4 or later (captures()).
  bool capture = false;
  bool captures() const { return capture && protocol_minor >= kCaptureMinor; }
  // Protocol 1.5: keeps a conv window per slot and layer (setup.conv, conv_step, conv_commit,
  // conv_committed_state, conv_pool). Only honoured for an implementation answering 1.5 or later.
  bool conv_state = false;
  bool conv_states() const { return conv_state && protocol_minor >= kConvStateMinor; }
  // Protocol 1.7: what one step may mix (ref::StepMix). Only honoured for an implementation answering 1.7 or
  // later (step_mixes()).
  ref::StepMix step_mix;
  ref::StepMix step_mixes() const { return protocol_minor >= kStepMixMinor ? step_mix : ref::StepMix{}; }
  // Protocol 1.8: the self checks claimed bit-exact and the precision its paths may differ at (ref::SelfClaim).
  // Only honoured for an implementation answering 1.8 or later (self_claims()).
  ref::SelfClaim self_check;
  ref::SelfClaim self_claims() const { return protocol_minor >= kSelfCheckMinor ? self_check : ref::SelfClaim{}; }
  // Protocol 1.9: told which steps replay a captured bucket (step and commit carry `replay`); needs capture and
  // graph_padding (from_json refuses the claim without them). Only honoured from 1.9 (graph_replays()).
  bool graph_replay = false;
  bool graph_replays() const { return graph_replay && captures() && graph_padding && protocol_minor >= kGraphReplayMinor; }
  // Protocol 1.10: the MRoPE presets whose positions and rotary it computes through the mrope_* commands, and
  // whether padding tokens get position 0 and stay unrotated (pad_positions "zero", the default) or are its own
  // ("any", not judged). Only honoured from 1.10 (mropes()).
  std::vector<std::string> mrope_models;
  bool mrope_pad_zero = true;
  bool mropes() const { return !mrope_models.empty() && protocol_minor >= kMropeMinor; }

  // Reads the hello answer's "capabilities" object; Error("target.hello.capabilities.<key>").
  static Capabilities from_json(const nlohmann::json& j);
  nlohmann::json to_json() const;
  // "" when cfg (with max_T and num_layers) is inside the capabilities, else why not ("act_dtype BF16 not
  // supported").
  std::string unsupported(const ModelConfig& cfg, int max_T) const;
  // The same for a conv.* fixture (protocol 1.3), which has no GDN/KDA model configuration: its activation and
  // state dtypes against act_dtypes / state_dtypes, and the verify window of conv.update / conv.commit against
  // max_T (0 for conv.prefill: a prompt chunk is not bounded by max_T).
  std::string unsupported_conv(DType act_dtype, DType state_dtype, int window) const;
  // Whether `fixture` may be sent for fixture op `op`: claimed, and the implementation speaks the minor version
  // that introduced it (fixture_op_minor).
  bool runs_fixture_op(const std::string& op) const;
};

// The fixture ops an implementation can claim: the golden operations (reference/golden.hpp, protocol 1.1) and
// the short convolution's ops (reference/conv_fixture.hpp, protocol 1.3).
inline const std::vector<std::string> kFixtureOps{
    "recurrent",    "chunked",     "mtp_verify",  "replay_commit", "mtp_batch",        "conv.prefill",
    "conv.update",  "conv.commit", "mrope.rotary", "tree.verify",  "tree.commit",      "tree.conv_update",
    "tree.conv_commit"};
// The protocol minor version that introduced fixture op `op`: 3 for the conv.* ops, 10 for mrope.rotary, 11 for
// the tree.* ops, 1 for the others.
int fixture_op_minor(const std::string& op);
// Why an implementation answering protocol 1.<minor> is not sent fixture op `op` ("the target speaks protocol 1.2,
// which has no fixture op 'conv.update' (added in 1.3)"); call it only when minor < fixture_op_minor(op).
std::string protocol_gap(int minor, const std::string& op);

}  // namespace replayssm::exec
