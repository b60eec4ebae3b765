// Tree speculative decoding of one request and one layer (tree.hpp): every node's state from its parent's.
#include "replayssm/recurrence/tree.hpp"

#include "replayssm/error.hpp"

namespace replayssm::ref {

void DraftTree::validate(const std::string& field) const {
  require(!parent.empty(), field + ".parent", "is empty: a tree has at least its root");
  require(parent[0] == -1, field + ".parent[0]", "is ", parent[0], ": node 0 is the root (parent -1)");
  for (int i = 1; i < size(); ++i)
    require(parent[static_cast<std::size_t>(i)] >= 0 && parent[static_cast<std::size_t>(i)] < i,
            field + ".parent[" + std::to_string(i) + "]", "is ", parent[static_cast<std::size_t>(i)],
            ", outside [0, ", i, "): a parent comes before its children in the flattened order");
}

std::vector<int> DraftTree::depth() const {
  validate();
  std::vector<int> d(parent.size(), 0);
  for (std::size_t i = 1; i < parent.size(); ++i) d[i] = d[static_cast<std::size_t>(parent[i])] + 1;
  return d;
}

std::vector<int> DraftTree::path_to(int node) const {
  validate();
  require(node >= -1 && node < size(), "accepted_node", "is ", node, ", outside [-1, N=", size(), ")");
  std::vector<int> path;
  for (int i = node; i >= 0; i = parent[static_cast<std::size_t>(i)]) path.insert(path.begin(), i);
  return path;
}

DraftTree DraftTree::chain(int T) {
  require(T >= 1, "T", "must be >= 1, got ", T);
  DraftTree t;
  for (int i = 0; i < T; ++i) t.parent.push_back(i - 1);
  return t;
}

namespace {

void check_window(const ModelConfig& cfg, const SequenceInputs& in, const DraftTree& tree) {
  tree.validate();
  in.validate(cfg);
  require(in.T == tree.size(), "inputs.T", "is ", in.T, ", the tree has ", tree.size(), " nodes");
}

// Every node from its parent: states[i] is S_i as the next node reads it (rounded to the state dtype after the
// step when round_each, as a kernel that stores each node and reads the parent's slot), o row i its output.
// recs (optional): each node's record, from the same step.
template <class R>
void run_tree(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in, const std::vector<R>& S0,
              const DraftTree& tree, bool round_each, const TokenHook* hook, std::vector<R>& o,
              std::vector<std::vector<R>>& states, std::vector<TokenRecord<R>>* recs = nullptr) {
  require(static_cast<std::int64_t>(S0.size()) == cfg.state_elems(), "checkpoint", "has ", S0.size(),
          " elements, expected HV*K*V = ", cfg.state_elems());
  const auto per_token = static_cast<std::size_t>(cfg.HV) * cfg.V;
  o.assign(per_token * static_cast<std::size_t>(tree.size()), R(0));
  states.clear();
  for (int i = 0; i < tree.size(); ++i) {
    const int par = tree.parent[static_cast<std::size_t>(i)];
    std::vector<R> S = par < 0 ? S0 : states[static_cast<std::size_t>(par)];
    TokenRecord<R>* rec = nullptr;
    if (recs) rec = &recs->emplace_back();
    token_step<R>(cfg, p, in, i, S.data(), &o[static_cast<std::size_t>(i) * per_token], rec, hook);
    if (round_each) round_to_state_dtype(cfg, S);
    states.push_back(std::move(S));
  }
}

SequenceInputs gather(const ModelConfig& cfg, const SequenceInputs& in, const std::vector<int>& nodes) {
  SequenceInputs out;
  for (std::size_t j = 0; j < nodes.size(); ++j) {
    const auto one = in.slice(cfg, nodes[j], 1);
    out = j == 0 ? one : SequenceInputs::concat(cfg, out, one);
  }
  return out;
}

std::vector<float> gather_columns(const ConvConfig& cfg, const std::vector<float>& x, const std::vector<int>& nodes) {
  const auto C = static_cast<std::size_t>(cfg.channels());
  std::vector<float> out;
  out.reserve(nodes.size() * C);
  for (int n : nodes) out.insert(out.end(), x.begin() + static_cast<std::ptrdiff_t>(n * C),
                                 x.begin() + static_cast<std::ptrdiff_t>((n + 1) * C));
  return out;
}

void check_conv_window(const ConvConfig& cfg, const std::vector<float>& x, const DraftTree& tree) {
  tree.validate();
  require(static_cast<std::int64_t>(x.size()) == tree.size() * cfg.channels(), "x", "has ", x.size(),
          " values, expected N*C = ", tree.size() * cfg.channels());
}

}  // namespace

FullStateVerify full_state_tree_verify(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in,
                                       const std::vector<float>& S0, const DraftTree& tree, StateRounding rounding,
                                       const TokenHook* hook) {
  check_window(cfg, in, tree);
  FullStateVerify r;
  run_tree<float>(cfg, p, in, S0, tree, rounding == StateRounding::PerToken, hook, r.o, r.states);
  round_to_act_dtype(cfg, r.o);
  for (auto& s : r.states) round_to_state_dtype(cfg, s);
  return r;
}

TreeTruth tree_verify_truth(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in,
                            const std::vector<double>& S0, const DraftTree& tree) {
  check_window(cfg, in, tree);
  TreeTruth r;
  run_tree<double>(cfg, p, in, S0, tree, false, nullptr, r.o, r.states);
  return r;
}

std::vector<float> full_state_tree_commit(const FullStateVerify& v, const std::vector<float>& S0, const DraftTree& tree,
                                          int accepted_node) {
  require(static_cast<int>(v.states.size()) == tree.size(), "tree", "has ", tree.size(), " nodes, the verify ",
          v.states.size());
  (void)tree.path_to(accepted_node);  // validates the node
  return accepted_node < 0 ? S0 : v.states[static_cast<std::size_t>(accepted_node)];
}

std::vector<float> replay_tree_commit(const ModelConfig& cfg, const LayerParams& p, const RawPayload& payload,
                                      const std::vector<float>& S0, const DraftTree& tree, int accepted_node,
                                      const TokenHook* hook) {
  require(payload.T == tree.size(), "payload.T", "is ", payload.T, ", the tree has ", tree.size(), " nodes");
  const auto path = tree.path_to(accepted_node);
  if (path.empty()) return S0;
  const SequenceInputs run = gather(cfg, payload.inputs(), path);
  return replay_commit(cfg, p, RawPayload{run.T, run.k, run.v, run.a, run.b}, S0, run.T, hook);
}

std::vector<Record> tree_records(const ModelConfig& cfg, const LayerParams& p, const SequenceInputs& in,
                                 const std::vector<float>& S0, const DraftTree& tree, DType record_dtype) {
  check_window(cfg, in, tree);
  std::vector<float> o;
  std::vector<std::vector<float>> states;
  std::vector<Record> recs;  // node i's record: its token stepped from its parent's unrounded state
  run_tree<float>(cfg, p, in, S0, tree, false, nullptr, o, states, &recs);
  for (auto& r : recs) round_record(r, record_dtype);
  return recs;
}

std::vector<float> ring_tree_commit(const ModelConfig& cfg, const std::vector<float>& S0,
                                    const std::vector<Record>& records, const DraftTree& tree, int accepted_node,
                                    Reconstruction mode) {
  require(static_cast<int>(records.size()) == tree.size(), "records", "has ", records.size(), " records, the tree ",
          tree.size(), " nodes");
  const auto path = tree.path_to(accepted_node);
  if (path.empty()) return S0;
  std::vector<const Record*> run;
  for (int n : path) run.push_back(&records[static_cast<std::size_t>(n)]);
  std::vector<float> S = reconstruct(cfg, S0, run, mode);
  round_to_state_dtype(cfg, S);
  return S;
}

std::vector<float> conv_tree_update(const ConvConfig& cfg, const ConvParams& p, const std::vector<float>& state,
                                    const std::vector<float>& x, const DraftTree& tree, ConvPrecision prec) {
  check_conv_window(cfg, x, tree);
  const auto C = static_cast<std::size_t>(cfg.channels());
  std::vector<float> y(x.size());
  for (int i = 0; i < tree.size(); ++i) {  // the chain of root .. i; node i's output is its last row
    const auto path = tree.path_to(i);
    const auto r = conv_update(cfg, p, state, gather_columns(cfg, x, path), static_cast<int>(path.size()), prec, false);
    std::copy(r.y.end() - static_cast<std::ptrdiff_t>(C), r.y.end(), y.begin() + static_cast<std::ptrdiff_t>(i * C));
  }
  return y;
}

std::vector<float> conv_tree_commit(const ConvConfig& cfg, const std::vector<float>& state, const std::vector<float>& x,
                                    const DraftTree& tree, int accepted_node) {
  check_conv_window(cfg, x, tree);
  const auto path = tree.path_to(accepted_node);
  const int n = static_cast<int>(path.size());
  if (n == 0) return state;
  return conv_commit_replay(cfg, state, gather_columns(cfg, x, path), n, n);
}

}  // namespace replayssm::ref
