// Tree speculative decoding (tree.hpp). Checked against what a tree must be, not against its own code:
//   * a chain (parent i - 1) gives the chain functions' results bit for bit (verify, both commits, conv);
//   * every node equals the chain of its own path run by run_recurrent / conv_update (the bookkeeping under test
//     is which tokens a node sees: the chain code has none of it);
//   * a sibling's tokens never reach another branch; another flattening of the same tree permutes the
//     results and changes nothing else;
//   * the three designs commit the same accepted path (raw replay and serial F32 records bit-identical to the
//     full-state AtCommit state), and a wrong accepted node (the chain's n - 1 taken for the tree's node)
//     commits another state;
//   * bad trees and accepted nodes are refused naming the field.
// Every comparison here is bit-exact: the paths compared perform the same binary32 (or binary64) operations
// in the same order, so any difference is a bookkeeping error.
#include <gtest/gtest.h>

#include <cstring>

#include "replayssm/error.hpp"
#include "replayssm/config.hpp"
#include "replayssm/recurrence/inputs.hpp"
#include "replayssm/recurrence/tree.hpp"
#include "replayssm/rng.hpp"
#include "replayssm/testing/field_of.hpp"

using namespace replayssm;
using namespace replayssm::ref;

namespace {

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
bool same(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// A top-k tree as SGLang's EAGLE drafts it: up to k children per node, depth up to D, at most N nodes, in
// breadth-first order (the flattened order of its verify window). Child counts are drawn per node.
DraftTree topk_tree(int k, int D, int N, std::uint64_t seed) {
  Rng rng(seed);
  DraftTree t;
  t.parent.push_back(-1);
  std::vector<int> level{0}, depth{0};
  for (int d = 1; d <= D && t.size() < N; ++d) {
    std::vector<int> next;
    for (int p : level)
      for (int c = static_cast<int>(rng.uniform_int(1, k)); c > 0 && t.size() < N; --c) {
        next.push_back(t.size());
        t.parent.push_back(p);
      }
    level = next;
  }
  return t;
}

std::vector<float> row(const std::vector<float>& o, const ModelConfig& cfg, int i) {
  const auto n = static_cast<std::ptrdiff_t>(cfg.HV) * cfg.V;
  return {o.begin() + i * n, o.begin() + (i + 1) * n};
}

SequenceInputs path_inputs(const ModelConfig& cfg, const SequenceInputs& in, const std::vector<int>& path) {
  SequenceInputs out = in.slice(cfg, path[0], 1);
  for (std::size_t j = 1; j < path.size(); ++j) out = SequenceInputs::concat(cfg, out, in.slice(cfg, path[j], 1));
  return out;
}

std::vector<ModelConfig> configs() {
  std::vector<ModelConfig> v;
  for (const char* name : {"tiny-gdn", "tiny-kda"})
    for (DType state : {DType::F32, DType::BF16}) {
      ModelConfig c = preset(name);
      c.num_layers = 1;
      c.state_dtype = state;
      v.push_back(c);
    }
  return v;
}

}  // namespace

TEST(Tree, AChainIsTheChainBitForBit) {
  for (const auto& cfg : configs())
    for (int T : {1, 4, 7})
      for (auto rounding : {StateRounding::AtCommit, StateRounding::PerToken}) {
        SCOPED_TRACE(cfg.name + " " + std::string(dtype_name(cfg.state_dtype)) + " T=" + std::to_string(T));
        const auto p = random_params(cfg, 11);
        const auto in = random_inputs(cfg, T, 12);
        auto S0 = random_state(cfg, 13);
        round_to_state_dtype(cfg, S0);
        const auto chain = DraftTree::chain(T);
        const auto tree = full_state_tree_verify(cfg, p, in, S0, chain, rounding);
        const auto want = full_state_verify(cfg, p, in, S0, rounding);
        EXPECT_TRUE(same(tree.o, want.o));
        ASSERT_EQ(tree.states.size(), want.states.size());
        for (int t = 0; t < T; ++t) EXPECT_TRUE(same(tree.states[t], want.states[t])) << "node " << t;
        const auto payload = replay_verify(cfg, p, in, S0).payload;
        const auto recs = tree_records(cfg, p, in, S0, chain, DType::F32);
        for (int a = -1; a < T; ++a) {
          EXPECT_TRUE(same(replay_tree_commit(cfg, p, payload, S0, chain, a), replay_commit(cfg, p, payload, S0, a + 1)));
          std::vector<const Record*> run;
          for (int j = 0; j <= a; ++j) run.push_back(&recs[j]);
          auto S = reconstruct(cfg, S0, run, Reconstruction::Serial);
          round_to_state_dtype(cfg, S);
          EXPECT_TRUE(same(ring_tree_commit(cfg, S0, recs, chain, a, Reconstruction::Serial), a < 0 ? S0 : S));
        }
        const auto cc = conv_config_for(cfg);
        const auto cp = random_conv_params(cc, 14);
        const auto cs = random_conv_state(cc, 15);
        const auto x = random_conv_inputs(cc, T, 16);
        EXPECT_TRUE(same(conv_tree_update(cc, cp, cs, x, chain, ConvPrecision::KernelFaithful),
                         conv_update(cc, cp, cs, x, T, ConvPrecision::KernelFaithful, false).y));
        for (int a = -1; a < T; ++a)
          EXPECT_TRUE(same(conv_tree_commit(cc, cs, x, chain, a), conv_commit_replay(cc, cs, x, T, a + 1))) << a;
      }
}

// Each node's output and state are those of the chain of its own path (root .. node) from the checkpoint, in
// float (kernel-faithful, both roundings) and in double (truth).
TEST(Tree, EveryNodeIsTheChainOfItsPath) {
  for (const auto& cfg : configs())
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      const auto tree = topk_tree(1 + static_cast<int>(seed % 4), 2 + static_cast<int>(seed % 5), 16, seed);
      SCOPED_TRACE(cfg.name + " " + std::string(dtype_name(cfg.state_dtype)) + " seed " + std::to_string(seed));
      const auto p = random_params(cfg, seed);
      const auto in = random_inputs(cfg, tree.size(), seed + 100);
      auto S0 = random_state(cfg, seed + 200);
      round_to_state_dtype(cfg, S0);
      for (auto rounding : {StateRounding::AtCommit, StateRounding::PerToken}) {
        const auto v = full_state_tree_verify(cfg, p, in, S0, tree, rounding);
        for (int i = 0; i < tree.size(); ++i) {
          const auto path = tree.path_to(i);
          const auto chain = full_state_verify(cfg, p, path_inputs(cfg, in, path), S0, rounding);
          EXPECT_TRUE(same(row(v.o, cfg, i), row(chain.o, cfg, static_cast<int>(path.size()) - 1))) << "node " << i;
          EXPECT_TRUE(same(v.states[i], chain.states.back())) << "node " << i;
        }
      }
      std::vector<double> S0d(S0.begin(), S0.end());
      const auto truth = tree_verify_truth(cfg, p, in, S0d, tree);
      for (int i = 0; i < tree.size(); ++i) {
        std::vector<double> S = S0d, o;
        run_recurrent<double>(cfg, p, path_inputs(cfg, in, tree.path_to(i)), S, o);
        const auto n = static_cast<std::ptrdiff_t>(cfg.HV) * cfg.V;
        EXPECT_TRUE(same(std::vector<double>(truth.o.begin() + i * n, truth.o.begin() + (i + 1) * n),
                         std::vector<double>(o.end() - n, o.end())))
            << "node " << i;
        EXPECT_TRUE(same(truth.states[i], S)) << "node " << i;
      }
    }
}

// Node 2 is a sibling of node 1 (both children of the root) and node 3 a child of node 1: changing node 2's
// tokens changes node 2 alone. Another breadth-first flattening of the same tree permutes the results.
TEST(Tree, SiblingsNeverLeakAndTheFlatteningOnlyPermutes) {
  const DraftTree tree{{-1, 0, 0, 1, 1, 2}};
  for (const auto& cfg : configs()) {
    const auto p = random_params(cfg, 3);
    const auto in = random_inputs(cfg, tree.size(), 4);
    auto S0 = random_state(cfg, 5);
    round_to_state_dtype(cfg, S0);
    const auto base = full_state_tree_verify(cfg, p, in, S0, tree, StateRounding::AtCommit);
    auto changed = in;
    const auto other = random_inputs(cfg, tree.size(), 6);
    for (auto f : {&SequenceInputs::k, &SequenceInputs::v}) {
      const auto n = (changed.*f).size() / static_cast<std::size_t>(tree.size());
      std::copy((other.*f).begin() + 2 * n, (other.*f).begin() + 3 * n, (changed.*f).begin() + 2 * n);
    }
    const auto after = full_state_tree_verify(cfg, p, changed, S0, tree, StateRounding::AtCommit);
    for (int i : {0, 1, 3, 4}) {
      EXPECT_TRUE(same(row(base.o, cfg, i), row(after.o, cfg, i))) << cfg.name << " node " << i;
      EXPECT_TRUE(same(base.states[i], after.states[i])) << cfg.name << " node " << i;
    }
    EXPECT_FALSE(same(base.states[2], after.states[2]));  // the change reached its own node ...
    EXPECT_FALSE(same(base.states[5], after.states[5]));  // ... and its child

    // The same tree flattened with the root's children swapped: old node j sits at perm[j].
    const std::vector<int> perm{0, 2, 1, 4, 5, 3};
    const DraftTree flipped{{-1, 0, 0, 1, 2, 2}};  // old 2 (now 1) has old 5 (now 3); old 1 (now 2) has old 3, 4 (now 4, 5)
    SequenceInputs moved = in;
    for (auto f : {&SequenceInputs::q, &SequenceInputs::k, &SequenceInputs::v, &SequenceInputs::a, &SequenceInputs::b}) {
      const auto n = (in.*f).size() / static_cast<std::size_t>(tree.size());
      for (int j = 0; j < tree.size(); ++j)
        std::copy((in.*f).begin() + j * n, (in.*f).begin() + (j + 1) * n, (moved.*f).begin() + perm[j] * n);
    }
    const auto re = full_state_tree_verify(cfg, p, moved, S0, flipped, StateRounding::AtCommit);
    for (int j = 0; j < tree.size(); ++j) {
      EXPECT_TRUE(same(row(base.o, cfg, j), row(re.o, cfg, perm[j]))) << cfg.name << " node " << j;
      EXPECT_TRUE(same(base.states[j], re.states[perm[j]])) << cfg.name << " node " << j;
    }
  }
}

// The designs commit the same path for every accepted node; the chain's bookkeeping (accepted node taken as
// n - 1 of the path length n) commits another node's state in a branching tree.
TEST(Tree, TheDesignsCommitTheAcceptedPathAndTheChainIndexIsWrong) {
  int wrong = 0;
  for (const auto& cfg : configs())
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      const auto tree = topk_tree(3, 4, 16, seed + 10);
      const auto p = random_params(cfg, seed);
      const auto in = random_inputs(cfg, tree.size(), seed + 1);
      auto S0 = random_state(cfg, seed + 2);
      round_to_state_dtype(cfg, S0);
      const auto full = full_state_tree_verify(cfg, p, in, S0, tree, StateRounding::AtCommit);
      const auto payload = replay_verify(cfg, p, in, S0).payload;
      const auto recs = tree_records(cfg, p, in, S0, tree, DType::F32);
      const auto depth = tree.depth();
      for (int a = -1; a < tree.size(); ++a) {
        const auto want = full_state_tree_commit(full, S0, tree, a);
        EXPECT_TRUE(same(replay_tree_commit(cfg, p, payload, S0, tree, a), want)) << "node " << a;
        EXPECT_TRUE(same(ring_tree_commit(cfg, S0, recs, tree, a, Reconstruction::Serial), want)) << "node " << a;
        if (a >= 0) {
          const int chain_index = depth[a];  // n - 1 for the path's n = depth + 1 tokens
          wrong += chain_index != a && !same(full_state_tree_commit(full, S0, tree, chain_index), want);
        }
      }
      EXPECT_TRUE(same(full_state_tree_commit(full, S0, tree, -1), S0));
    }
  EXPECT_GT(wrong, 100) << "the chain's accepted index must commit another state in branching trees";
}

// A node's conv window is made of its ancestors' inputs: node 3 (child of node 1) reads x_0, x_1, x_3, never
// x_2, which sits between them in the flattened order.
TEST(Tree, TheConvWindowIsMadeOfAncestors) {
  const DraftTree tree{{-1, 0, 0, 1}};
  const auto cc = conv_config_for(preset("tiny-gdn"));
  const auto cp = random_conv_params(cc, 1);
  const auto cs = random_conv_state(cc, 2);
  const auto x = random_conv_inputs(cc, 4, 3);
  const auto C = static_cast<std::ptrdiff_t>(cc.channels());
  const auto y = conv_tree_update(cc, cp, cs, x, tree, ConvPrecision::KernelFaithful);
  std::vector<float> anc(x.begin(), x.begin() + 2 * C);
  anc.insert(anc.end(), x.begin() + 3 * C, x.end());
  const auto by_path = conv_update(cc, cp, cs, anc, 3, ConvPrecision::KernelFaithful, false).y;
  const auto flat = conv_update(cc, cp, cs, x, 4, ConvPrecision::KernelFaithful, false).y;
  const std::vector<float> y3(y.begin() + 3 * C, y.end());
  EXPECT_TRUE(same(y3, std::vector<float>(by_path.end() - C, by_path.end())));
  EXPECT_FALSE(same(y3, std::vector<float>(flat.end() - C, flat.end())));  // the flattened-order window differs
  EXPECT_TRUE(same(conv_tree_commit(cc, cs, x, tree, 3), conv_commit_replay(cc, cs, anc, 3, 3)));
  EXPECT_FALSE(same(conv_tree_commit(cc, cs, x, tree, 3), conv_commit_replay(cc, cs, x, 4, 4)));
  EXPECT_TRUE(same(conv_tree_commit(cc, cs, x, tree, -1), cs));
}

TEST(Tree, BadTreesAndAcceptedNodesAreRefusedNamingTheField) {
  auto field = [](auto f) { return replayssm::testing::field_of(f); };
  EXPECT_EQ(field([] { DraftTree{{0, 0}}.validate(); }), "tree.parent[0]");
  EXPECT_EQ(field([] { DraftTree{{-1, 0, 2}}.validate(); }), "tree.parent[2]");
  EXPECT_EQ(field([] { DraftTree{{-1, -1}}.validate(); }), "tree.parent[1]");
  EXPECT_EQ(field([] { DraftTree{}.validate(); }), "tree.parent");
  EXPECT_EQ(field([] { (void)DraftTree{{-1, 0}}.path_to(2); }), "accepted_node");
  EXPECT_EQ(field([] { (void)DraftTree{{-1, 0}}.path_to(-2); }), "accepted_node");
  ModelConfig cfg = preset("tiny-gdn");
  cfg.num_layers = 1;
  const auto p = random_params(cfg, 1);
  const auto in = random_inputs(cfg, 3, 2);
  const auto S0 = random_state(cfg, 3);
  EXPECT_EQ(field([&] { (void)full_state_tree_verify(cfg, p, in, S0, DraftTree::chain(4), StateRounding::AtCommit); }),
            "inputs.T");
}
