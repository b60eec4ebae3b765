"""The tree fixture ops (docs/fixture-format.md section 12, protocol 1.11) in float32 NumPy: what
examples/numpy_replay.py answers to the protocol's `fixture` command for tree.verify, tree.commit,
tree.conv_update and tree.conv_commit.

A draft tree is N nodes in the engine's flattened order with a parent per node (in.parent: -1 for node 0, the
root, which reads the checkpoint; else an earlier node). Node i's path is root .. i through the parents.

  tree.verify       node i's state is its parent's state advanced by node i's token (the checkpoint for the
                    root); out.o[i] is read from it, out.states[i] is it, rounded to the state dtype
  tree.commit       the state of the accepted node's path: the checkpoint advanced by the path's tokens in order
                    (in.accepted_node = -1: the checkpoint's bytes)
  tree.conv_update  node i's conv output over its own window [state | x of the path root .. i]: its ancestors'
                    raw inputs, never the nodes between them in the flattened order
  tree.conv_commit  the last W - 1 columns of [state | x of the accepted node's path]

The token step and the convolution are numpy_fixture_ops.py's and numpy_conv_ops.py's, run over each node's
path; nothing here is shared with the C++ reference.

Seeded faults (numpy_replay.py --fault F), each a bug of the tree class, each changing only what it says:

  tree_accepted_as_chain     tree.commit commits the node at position depth(a) of the flattened order (the
                             chain's accepted index n - 1) instead of the accepted node a
  tree_sibling_leak          tree.verify advances each node from the node before it in the flattened order instead
                             of its parent: a sibling's state leaks into its brother
  tree_conv_flattened        tree.conv_update builds node i's window from nodes 0 .. i of the flattened order
                             instead of its ancestors
  tree_conv_commit_as_chain  tree.conv_commit keeps the window of the flattened prefix 0 .. depth(a) instead of
                             the accepted node's path
"""

from __future__ import annotations

import numpy as np

from numpy_conv_ops import run_conv_op
from numpy_fixture_ops import FixtureOps
from replayssm_kit.target import TargetError

TREE_OPS = ("tree.verify", "tree.commit", "tree.conv_update", "tree.conv_commit")
TREE_FAULTS = ("tree_accepted_as_chain", "tree_sibling_leak", "tree_conv_flattened", "tree_conv_commit_as_chain")


def _parents(inputs: dict, N: int) -> list:
    if "in.parent" not in inputs:
        raise TargetError("in.parent", "is missing from the command")
    p = [int(x) for x in np.asarray(inputs["in.parent"]).reshape(-1)]
    if len(p) != N:
        raise TargetError("in.parent", f"has {len(p)} entries for {N} nodes")
    for i, x in enumerate(p):
        if (i == 0 and x != -1) or (i > 0 and not 0 <= x < i):
            raise TargetError(f"in.parent[{i}]", f"is {x}: node 0 is the root (-1), node i's parent an earlier node")
    return p


def _path(parent: list, node: int) -> list:
    """root .. node through the parents."""
    path = []
    while node >= 0:
        path.append(node)
        node = parent[node]
    return path[::-1]


def _accepted(inputs: dict, N: int) -> int:
    if "in.accepted_node" not in inputs:
        raise TargetError("in.accepted_node", "is missing from the command")
    a = int(np.asarray(inputs["in.accepted_node"]).reshape(()))
    if not -1 <= a < N:
        raise TargetError("in.accepted_node", f"is {a}, outside [-1, {N})")
    return a


def tree_verify(config: dict, inputs: dict, fault: str | None) -> dict:
    ops = FixtureOps(config, inputs, fault)
    q, k, v, a, b = ops._sequence()
    N = q.shape[0]
    parent = _parents(inputs, N)
    if fault == "tree_sibling_leak":
        parent = [-1] + list(range(N - 1))
    a = a.reshape(N, ops.HV, -1)
    root = ops._to_math(ops._need("in.state"))
    states, o = [], np.zeros((N, ops.HV, ops.V), dtype=np.float32)
    for i in range(N):
        S = np.array(root if parent[i] < 0 else states[parent[i]], copy=True)
        o[i] = ops.math.token(S, ops.params, k[i], v[i], a[i], b[i], q[i])
        states.append(S)
    return {"out.o": ops._store_o(o), "out.states": np.stack([ops._store_state(S) for S in states])}


def tree_commit(config: dict, inputs: dict, fault: str | None) -> dict:
    ops = FixtureOps(config, inputs, fault)
    k, v, a, b = (ops._need("in." + n) for n in ("k", "v", "a", "b"))
    N = k.shape[0]
    parent = _parents(inputs, N)
    node = _accepted(inputs, N)
    if node < 0:
        return {"out.state": ops._need("in.state")}  # nothing accepted: the checkpoint as it was
    path = _path(parent, node)
    if fault == "tree_accepted_as_chain":
        path = _path(parent, len(path) - 1)
    S = ops._to_math(ops._need("in.state"))
    ops._run(S, k[path], v[path], a[path], b[path])
    return {"out.state": ops._store_state(S)}


def _conv_inputs(inputs: dict, nodes: list) -> dict:
    sub = {name: inputs[name] for name in ("in.state", "param.weight", "param.bias") if name in inputs}
    if "in.x" not in inputs:
        raise TargetError("in.x", "is missing from the command")
    sub["in.x"] = np.asarray(inputs["in.x"])[nodes]
    return sub


def tree_conv_update(config: dict, inputs: dict, fault: str | None) -> dict:
    N = np.asarray(inputs.get("in.x", np.zeros((0, 0)))).shape[0]
    parent = _parents(inputs, N)
    ys = []
    for i in range(N):
        nodes = list(range(i + 1)) if fault == "tree_conv_flattened" else _path(parent, i)
        ys.append(run_conv_op("conv.update", config, _conv_inputs(inputs, nodes))["out.y"][-1])
    return {"out.y": np.stack(ys)}


def tree_conv_commit(config: dict, inputs: dict, fault: str | None) -> dict:
    N = np.asarray(inputs.get("in.x", np.zeros((0, 0)))).shape[0]
    parent = _parents(inputs, N)
    node = _accepted(inputs, N)
    if node < 0:
        if "in.state" not in inputs:
            raise TargetError("in.state", "is missing from the command")
        return {"out.state": inputs["in.state"]}
    nodes = _path(parent, node)
    if fault == "tree_conv_commit_as_chain":
        nodes = list(range(len(nodes)))
    sub = _conv_inputs(inputs, nodes)
    sub["in.accepted"] = np.int32(len(nodes))
    return {"out.state": run_conv_op("conv.commit", config, sub)["out.state"]}


def run_tree_op(op: str, config: dict, inputs: dict, fault: str | None = None) -> dict:
    return {"tree.verify": tree_verify, "tree.commit": tree_commit, "tree.conv_update": tree_conv_update,
            "tree.conv_commit": tree_conv_commit}[op](config, inputs, fault)
