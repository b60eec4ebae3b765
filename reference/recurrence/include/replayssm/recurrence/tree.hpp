// replayssm/recurrence/tree.hpp — tree speculative decoding of one request and one layer: the full-state tree
// verify, the accepted path's commit in the full-state and both ReplaySSM designs, and the short convolution's
// window over a node's ancestors.
//
// A draft tree is verified in one window of N nodes in the engine's flattened order (parents before children;
// SGLang's EAGLE/MTP tree with `--speculative-eagle-topk` > 1, vLLM's `retrieve_parent_token`). Node 0 is the
// root: the token a chain verify calls token 1, read from the checkpoint S_0. Every other node i has one parent
// p(i) in [0, i), and its state is its parent's advanced by its own token:
//   S_i = step(S_{p(i)}, token i)      (S_{p(0)} = S_0),      o_i read from the same step,
// so a node sees exactly its ancestors' tokens, never a sibling's. A chain is the tree p(i) = i - 1, and the
// functions below give it the chain's results bit for bit (full_state_verify, replay_commit, reconstruct,
// conv_update / conv_commit_replay). depth(0) = 0, depth(i) = depth(p(i)) + 1: the node's position is the
// request's next position plus its depth.
//
// Acceptance names one node a (the deepest accepted, SGLang's `accept_index` entry; -1: nothing accepted, a
// chain's n = 0). The committed path is root .. a (depth(a) + 1 tokens, a chain's n = a + 1):
//   full-state — the stored S_a;
//   raw replay — the path's captured inputs replayed from S_0 in path order, rounded once (bit-identical to
//                the full-state S_a stored with StateRounding::AtCommit);
//   corrected updates — the path's records (u_i = beta_i (v_i - alpha_i S_{p(i)}^T k_i), computed against the
//                node's own parent state) folded from S_0 (Reconstruction), rounded once.
// Conv (conv.hpp): node i's window is the last W-1 raw inputs of [S | x_path(root..i)]; the committed conv
// state is the last W-1 columns of [S | x_path(root..a)].
// Sources: sgl-project/sglang PR 11133 (MTP topk > 1 for Qwen3-Next: a parent pointer per draft token, each
// node's state from its parent's, the conv update over parents), PR 27463 (tree drafting on spec v2: the last
// accepted node gathered from accept_index), PR 27047 (conv1d over the tree, retrive_parent_token);
// vllm-project/vllm PR 29846 (retrieve_parent_token in fused_recurrent_gated_delta_rule and
// causal_conv1d_update).
//
// Precisions: the float functions are kernel-faithful (the token step's binary32 arithmetic, outputs rounded
// to the activation dtype, states to the state dtype as a pool stores them); tree_verify_truth runs the same
// tree in double with nothing rounded.
#pragma once

#include <string>
#include <vector>

#include "replayssm/config.hpp"
#include "replayssm/recurrence/conv.hpp"
#include "replayssm/recurrence/gdn.hpp"
#include "replayssm/recurrence/mtp.hpp"

namespace replayssm::ref {

struct DraftTree {
  std::vector<int> parent;  // [N]: parent[0] = -1, parent[i] in [0, i) for i >= 1
  int size() const { return static_cast<int>(parent.size()); }
  // Error("<field>.parent[i]") for a node whose parent is not an earlier node (or a root that is not node 0),
  // Error("<field>.parent") for an empty tree.
  void validate(const std::string& field = "tree") const;
  std::vector<int> depth() const;
  // The nodes root .. node in path order; empty for node = -1. Error("accepted_node") outside [-1, N).
  std::vector<int> path_to(int node) const;
  static DraftTree chain(int T);  // parent[i] = i - 1
};

// Full-state tree verify, kernel-faithful: o [N, HV, V] rounded to the activation dtype, states[i] = S_i in
// cfg.layout rounded to the state dtype. AtCommit: each node continues from its parent's unrounded F32 state
// (a kernel that keeps the path in registers); PerToken: from the parent's stored, rounded state (a kernel that
// reads the parent's intermediate slot). in holds the N nodes' tokens in flattened order. hook: tests only.
FullStateVerify full_state_tree_verify(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in,
                                       const std::vector<float>& S0, const DraftTree& tree, StateRounding rounding,
                                       const TokenHook* hook = nullptr);

// The same tree in double ("truth"): o [N, HV, V] and every S_i, unrounded.
struct TreeTruth {
  std::vector<double> o;
  std::vector<std::vector<double>> states;
};
TreeTruth tree_verify_truth(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in,
                            const std::vector<double>& S0, const DraftTree& tree);

// The committed checkpoint for accepted node a in [-1, N): S0 for -1, else the stored S_a.
std::vector<float> full_state_tree_commit(const FullStateVerify& v, const std::vector<float>& S0, const DraftTree& tree,
                                          int accepted_node);
// Raw replay: the path's tokens of the N-node payload (replay_verify's capture of the tree window) replayed
// from S0 in path order in F32, rounded once. a = -1 returns S0 unchanged.
std::vector<float> replay_tree_commit(const ModelConfig& cfg, const LayerParams& p, const RawPayload& payload,
                                      const std::vector<float>& S0, const DraftTree& tree, int accepted_node,
                                      const TokenHook* hook = nullptr);
// Corrected-update records of every node, each against its parent's state (F32, AtCommit order), stored at
// record_dtype (u and k; g stays F32).
std::vector<Record> tree_records(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in,
                                 const std::vector<float>& S0, const DraftTree& tree, DType record_dtype);
// The path's records folded into S0 (reconstruct with `mode`), rounded once to the state dtype. Serial with F32
// records is bit-identical to the full-state AtCommit S_a.
std::vector<float> ring_tree_commit(const ModelConfig& cfg, const std::vector<float>& S0,
                                    const std::vector<Record>& records, const DraftTree& tree, int accepted_node,
                                    Reconstruction mode);

// Conv over the tree: y [N, C] (activation dtype), node i's window made of S and its ancestors' raw inputs;
// x [N, C] in flattened order.
std::vector<float> conv_tree_update(const ConvConfig& cfg, const ConvParams& p, const std::vector<float>& state,
                                    const std::vector<float>& x, const DraftTree& tree, ConvPrecision prec);
// The committed conv state for accepted node a: the last W-1 columns of [state | x of root .. a] (state for -1).
std::vector<float> conv_tree_commit(const ConvConfig& cfg, const std::vector<float>& state, const std::vector<float>& x,
                                    const DraftTree& tree, int accepted_node);

}  // namespace replayssm::ref
