"""A ReplaySSM raw-payload target in NumPy (design 1 of docs/math.md), judged through the target protocol:

    replayssm fuzz --target exec:'python3 tools/python/examples/numpy_replay.py' --preset tiny-gdn

* step: verify every real row from its checkpoint in float32 (outputs only, no state stored) and capture
  each window token's raw k, v, a, b into a payload; prefill rows are committed at once (fresh ones start
  from a zero state); PAD rows (any of the three PAD conventions) and the graph tail of a captured batch
  (rows from live_rows on) read and write no state and output zeros. Slots are read from the kit's index arrays
  (rows.index: strided column views, read through NumPy indexing).
* conv_step / conv_commit (protocol 1.5, `--conv on` campaigns): a conv window per slot and layer kept next to
  the recurrent state (numpy_conv_slots.py); copy_slot carries it too.
* capture (protocol 1.4): a new CUDA-graph bucket warmed up on dummy inputs as PAD rows: nothing changes.
  A step that replays it (protocol 1.9, rows.replay) runs the rows its persistent index buffers hold, refreshed
  from the step and commit first (numpy_graphs.py; its faults skip one refresh after the first replay).
* commit: replay the first n payload tokens of each verify row from the checkpoint and store the state,
  rounded once to the state dtype; n = 0 writes nothing.

GDN and KDA, both gate forms, both l2norm forms, both layouts, F32/BF16 activations and states, GVA.

It also implements the fixture ops (numpy_fixture_ops.py), so `replayssm conform --target exec:...` runs the
committed static fixtures through it as well:
    replayssm check --target exec:'python3 tools/python/examples/numpy_replay.py' fixtures --quiet

`--fault off_by_one_accepted` seeds a bookkeeping bug (the commit replays n - 1 tokens) that a campaign
must catch: replayssm fuzz --target exec:'python3 .../numpy_replay.py --fault off_by_one_accepted' ...
(more, pad_row_writes_slot0, graph_tail_processed, writes_gap, strided_index_as_contiguous and
capture_writes_live_state, are caught through `pool`, the PAD outputs or the committed states: see FAULTS).
replay_commit_drops_last is in the fixture ops only (numpy_fixture_ops.py); conv_commit_keeps_window_tail is in
the conv fixture ops and in the conv windows (numpy_conv_ops.py, numpy_conv_slots.py): both the fixture check
and a conv campaign catch it:
    replayssm check --target exec:'python3 .../numpy_replay.py --fault conv_commit_keeps_window_tail' fixtures/conv
    replayssm fuzz --target exec:'python3 .../numpy_replay.py --fault conv_commit_keeps_window_tail' --conv on ...
conv_window_not_copied and conv_fresh_keeps_tenant_window act on the conv windows only (numpy_conv_slots.py).

MRoPE positions (protocol 1.10): it claims "mrope" for all four presets with padding at position 0, and the fixture
op mrope.rotary; the bookkeeping and the rotary are numpy_mrope.py, with its seeded faults (MROPE_FAULTS:
mrope_delta_from_chunk, mrope_verify_advances_T, mrope_pad_takes_last_delta, mrope_delta_by_batch_row,
mrope_index_from_rope), which act on the MRoPE commands only:
    replayssm mrope fuzz --target exec:'python3 .../numpy_replay.py --fault mrope_verify_advances_T'

Tree fixture ops (protocol 1.11): tree.verify, tree.commit, tree.conv_update and tree.conv_commit (numpy_tree_ops.py),
each node from its parent, commits and conv windows along the accepted node's path; its seeded faults (TREE_FAULTS:
tree_accepted_as_chain, tree_sibling_leak, tree_conv_flattened, tree_conv_commit_as_chain) act on those ops only:
    replayssm check --target exec:'python3 .../numpy_replay.py --fault tree_sibling_leak' fixtures/trees
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tools/python: the replayssm_kit next to this example
sys.path.insert(0, HERE)

from numpy_conv_slots import SLOT_FAULTS, ConvSlots  # noqa: E402
from numpy_fixture_ops import FIXTURE_FAULTS, run_fixture_op  # noqa: E402
from numpy_graphs import GRAPH_FAULTS, CapturedGraph  # noqa: E402
from numpy_mrope import MROPE_FAULTS, NumpyMrope, run_rotary_fixture  # noqa: E402
from numpy_tree_ops import TREE_FAULTS, TREE_OPS, run_tree_op  # noqa: E402
from replay_math import Recurrence, round_bf16  # noqa: E402
from replayssm_kit.target import (CONV_FIXTURE_OPS, FIXTURE_OPS, MROPE_FIXTURE_OPS, MROPE_MODELS, Row,  # noqa: E402
                                  Rows, Target, TargetError, serve, step_mix_excess)

# Seeded bugs, each visible to a different check of the judge: the committed states (off_by_one_accepted),
# the untouched-slot check through `pool` (pad_row_writes_slot0: a PAD row's index -1 aliasing slot 0) and the
# gaps through `pool` (writes_gap: a commit spills one element past the slot's state); graph_tail_processed runs
# a captured batch over its whole capacity, so the stale slot ids in its tail are verified and committed;
# width_capped_at_8 is a verify compiled for at most 8 tokens: a wider window's tokens beyond the 8th get no output
# and the commit caps n at 8 (only a window wider than 8 shows it); strided_index_as_contiguous hands the kit's
# index arrays to the "kernel" by data pointer, assuming unit stride (H6: they are strided column views, so
# every row after the first reads another column's values); capture_writes_live_state warms a newly captured
# bucket up on the last step's rows (the index buffer as it is) instead of PAD rows and commits the dummy
# window into their slots (H13); l2norm_eps_outside_sqrt normalises q and k as x / (sqrt(sum(x^2)) + eps) while
# claiming the forms with eps under the root (one rounding for unit-variance rows, a large error for the rows
# of norm ~1e-3 that checkpoint-sized inputs and the real checkpoints' fixtures carry); commit_one_call_late
# holds each commit back and runs it at the next commit (the state a step reads is one commit behind);
# one_width_unclaimed and prefill_apart_unclaimed are a kernel that takes one width per launch, or keeps prefill
# chunks apart from verify rows, and refuses any other step without claiming the narrowing (step_mix, protocol
# 1.7): the judge's steps mix widths and kinds unless told otherwise, so the refusal is a failure. The same
# kernel that claims it (--step-mix) is CONFORMANT. decode_path_drift is a separate T = 1 decode kernel beside
# the verify kernel whose state update is (1 - 2^-10) of the verify kernel's (a decay computed another way), in an
# implementation that claims the bf16 tier: every single-token commit lands about 1e-3 of the state's scale away,
# inside the tier, and only the judge's self check (one verify of T tokens against T single-token steps of the same
# implementation, protocol 1.8) catches it. graph_replay_slots_baked, graph_replay_live_rows_baked and
# graph_replay_accepted_baked (numpy_graphs.py) are a captured bucket whose persistent buffers keep the slots, the
# live row count or the accepted counts of its first replay: only a later replay with other values shows them.
# The MRoPE faults (MROPE_FAULTS, numpy_mrope.py) act on the mrope_* commands only; the tree faults (TREE_FAULTS,
# numpy_tree_ops.py) on the tree fixture ops only.
DECODE_DRIFT = 2.0 ** -10
STEP_MIX_FAULTS = {"one_width_unclaimed": {"one_width": True}, "prefill_apart_unclaimed": {"prefill_apart": True}}
FAULTS = ("off_by_one_accepted", "pad_row_writes_slot0", "writes_gap", "graph_tail_processed",
          "width_capped_at_8", "strided_index_as_contiguous", "capture_writes_live_state",
          "l2norm_eps_outside_sqrt", "commit_one_call_late", "decode_path_drift") + tuple(STEP_MIX_FAULTS) + FIXTURE_FAULTS \
    + SLOT_FAULTS + GRAPH_FAULTS + MROPE_FAULTS + TREE_FAULTS
# --step-mix: what the example's kernel takes in one step, claimed as the step_mix capability.
STEP_MIXES = {"any": {}, "one_width": {"one_width": True}, "prefill_apart": {"prefill_apart": True},
              "both": {"one_width": True, "prefill_apart": True}}
WIDTH_CAP = 8


class NumpyReplay(Target):
    def __init__(self, fault: str | None = None, claims: str = "all", step_mix: str = "any"):
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r} (known: {', '.join(FAULTS)})")
        if step_mix not in STEP_MIXES:
            raise ValueError(f"unknown step mix {step_mix!r} (known: {', '.join(STEP_MIXES)})")
        self.fault, self.claims = fault, claims
        self.step_mix = STEP_MIXES[step_mix]  # claimed
        self.takes = self.step_mix or STEP_MIX_FAULTS.get(fault, {})  # what the kernel takes, claimed or not
        self.mrope = NumpyMrope(fault)

    def capabilities(self) -> dict:
        caps = self._all_capabilities()
        if self.claims == "nothing":  # no op and no MRoPE model: every configuration is refused, no campaign can run
            caps["ops"] = []
            del caps["mrope"]
        elif self.claims == "unexercisable":
            # The verify fixture op at a dtype pair no committed mtp_verify fixture has (BF16 activations with a
            # BF16 state): the campaigns run, the claimed op's fixtures cannot.
            caps.update(act_dtypes=["BF16"], state_dtypes=["BF16"], fixture_ops=["mtp_verify"])
        if self.step_mix:
            caps["step_mix"] = dict(self.step_mix)
        if self.fault == "decode_path_drift":  # the claim under which the drift stays inside the tier
            caps["tier"] = "bf16"
        return caps

    def _all_capabilities(self) -> dict:
        return {"name": "numpy-replay" + (f"+{self.fault}" if self.fault else ""), "tier": "fp32",
                "bit_exact": False, "pad_outputs_zero": True, "design": "replay", "copy_slot": True,
                "l2norms": ["rsqrt_mul", "div_sqrt"], "kda_gates": ["softplus", "lower_bound_sigmoid"],
                "pad_conventions": ["minus_one", "null_block", "pad_slot"], "graph_padding": True,
                "out_of_place_commit": True, "fixture_ops": list(FIXTURE_OPS + CONV_FIXTURE_OPS + MROPE_FIXTURE_OPS + TREE_OPS),
                "capture": True,
                # Replayed buckets run from their persistent index buffers (numpy_graphs.py, protocol 1.9).
                "graph_replay": True,
                # Every row is computed apart from the others, the same way each time (protocol 1.8).
                "self_check": {"exact": ["repeat", "permute"], "tier": "fp32"},
                # MRoPE positions of every preset, padding at position 0 and unrotated (numpy_mrope.py, protocol 1.10).
                "mrope": {"models": list(MROPE_MODELS), "pad_positions": "zero"}}

    def _kernel_rows(self, rows) -> list:
        """The rows as the kernel sees them: slot and write_slot read from the kit's index arrays (rows.index,
        strided column views). The strided_index_as_contiguous fault reads them through their data pointer as if
        they were contiguous int32 arrays, as a kernel handed tensor.data_ptr() without the stride would."""
        def by_pointer(a):
            return np.ctypeslib.as_array(ctypes.cast(a.ctypes.data, ctypes.POINTER(ctypes.c_int32)), shape=(len(a),))
        read = by_pointer if self.fault == "strided_index_as_contiguous" else np.asarray
        slots, writes = read(rows.index.slot), read(rows.index.write_slot)
        return [dataclasses.replace(r, slot=int(s), write_slot=int(w)) for r, s, w in zip(rows, slots, writes)]

    def _pad(self, r) -> bool:
        """No state for this row (Row.is_pad); the graph_tail_processed fault sees only the PAD sentinel."""
        return r.slot == r.pad_sentinel if self.fault == "graph_tail_processed" else r.is_pad

    def setup(self, setup: dict, params: list) -> None:
        cfg = setup["config"]
        self.math = Recurrence(cfg, self.fault == "l2norm_eps_outside_sqrt")
        self.deferred = None  # commit_one_call_late: the commit held back until the next one
        self.params = params
        self.L, self.S, self.max_T = cfg["num_layers"], setup["num_slots"], setup["max_T"]
        self.E = cfg["HV"] * cfg["K"] * cfg["V"]
        self.stride = setup["slot_stride"] or self.E
        self.kv = cfg["layout"] == "kv"
        self.bf16_state = cfg["state_dtype"] == "BF16"
        self.shape = (cfg["HV"], cfg["K"], cfg["V"]) if self.kv else (cfg["HV"], cfg["V"], cfg["K"])
        self.pools = [np.full((self.S, self.stride), setup["poison"], dtype=np.float32) for _ in range(self.L)]
        self.last = None  # (rows, payload[layer][row] = (k, v, a, b) of the window) of the uncommitted step
        self.cfg = cfg
        self.index_buffer = []  # capture_writes_live_state: the real rows of the last step
        self.graphs = {}  # (rows, T) -> CapturedGraph: the buckets captured in this case
        self.conv = ConvSlots(setup, self.fault) if setup.get("conv") is not None else None
    # --- slots: a head is [K, V] (kv) or [V, K] (vk) in the pool; the math works on [K, V] --------------------
    def _get(self, l: int, slot: int) -> np.ndarray:
        s = self.pools[l][slot, : self.E].reshape(self.shape)
        return np.array(s if self.kv else s.transpose(0, 2, 1), dtype=np.float32, order="C")

    def _put(self, l: int, slot: int, S: np.ndarray) -> None:
        if self.bf16_state:
            S = round_bf16(S)  # the one rounding of a commit
        self.pools[l][slot, : self.E] = (S if self.kv else S.transpose(0, 2, 1)).reshape(-1)
        if self.fault == "writes_gap" and self.stride > self.E:
            self.pools[l][slot, self.E] = 0.0

    def _replay(self, l: int, slot: int, write_slot: int, captured, n: int) -> None:
        S = self._get(l, slot)
        k, v, a, b = captured
        for t in range(n):
            self.math.token(S, self.params[l], k[t], v[t], a[t], b[t])
        self._put(l, write_slot, S)

    def _check(self, rows: list, n_tokens: int) -> None:
        for i, r in enumerate(rows):
            if not -1 <= r.slot < self.S:
                raise TargetError(f"rows[{i}].slot", f"is {r.slot}, outside [-1, {self.S})")
            if not -1 <= r.write_slot < self.S:
                raise TargetError(f"rows[{i}].write_slot", f"is {r.write_slot}, outside [-1, {self.S})")
            if not (0 if r.is_pad else 1) <= r.T <= self.max_T:
                raise TargetError(f"rows[{i}].T", f"is {r.T}, outside [1, {self.max_T}]")
            if r.token_offset + r.T > n_tokens:
                raise TargetError(f"rows[{i}].token_offset", f"window [{r.token_offset}, {r.token_offset + r.T}) "
                                                             f"runs past the {n_tokens} tokens")

    # --- the protocol's commands ---------------------------------------------------------------------------
    def step(self, rows: list, inputs: list) -> list:
        replay = getattr(rows, "replay", None)
        rows = self._kernel_rows(rows) if isinstance(rows, Rows) else rows
        if replay is not None:  # a replayed bucket runs what its persistent buffers hold
            rows = self.graphs[replay].load_step(rows)
        n_tokens = inputs[0]["q"].shape[0]
        self._check(rows, n_tokens)
        if self.takes and (why := step_mix_excess(rows, self.takes)):
            raise TargetError("rows", f"this kernel takes one step mix per launch ({self.takes}): {why}")
        self.index_buffer = [r for r in rows if not self._pad(r)]
        for r in rows:
            if not self._pad(r) and r.is_prefill and r.fresh:
                for l in range(self.L):
                    self._put(l, r.slot, np.zeros(self.shape, dtype=np.float32))
        outputs, payload = [], []
        for l, x in enumerate(inputs):
            o = np.zeros(x["v"].shape, dtype=np.float32)  # PAD windows stay zero
            captured = []
            for r in rows:
                w = slice(r.token_offset, r.token_offset + r.T)
                pad_aliases = self.fault == "pad_row_writes_slot0"
                captured.append(tuple(x[name][w].copy() for name in ("k", "v", "a", "b"))
                                if pad_aliases or not self._pad(r) else None)
                if self._pad(r):
                    continue
                S = self._get(l, r.slot)
                width = min(r.T, WIDTH_CAP) if self.fault == "width_capped_at_8" and not r.is_prefill else r.T
                for t in range(r.token_offset, r.token_offset + width):
                    o[t] = self.math.token(S, self.params[l], x["k"][t], x["v"][t], x["a"][t], x["b"][t], x["q"][t])
            outputs.append(o)
            payload.append(captured)
        if self.fault == "pad_row_writes_slot0":
            for l in range(self.L):
                for i, r in enumerate(rows):
                    if self._pad(r) and r.T > 0:
                        self._replay(l, 0, 0, payload[l][i], r.T)
        for l in range(self.L):  # prefill chunks are committed by the step itself
            for i, r in enumerate(rows):
                if r.is_prefill and not self._pad(r) and r.write_slot != -1 and r.T > 0:
                    self._replay(l, r.slot, r.write_slot, payload[l][i], r.T)
        self.last = (rows, payload)
        return outputs

    def commit(self, rows: list) -> None:
        replay = getattr(rows, "replay", None)
        rows = self._kernel_rows(rows) if isinstance(rows, Rows) else rows
        if replay is not None:
            rows = self.graphs[replay].load_commit(rows)
        if self.last is None:
            raise TargetError("rows", "commit without an uncommitted step")
        stepped, payload = self.last
        if [(r.slot, r.T) for r in rows] != [(r.slot, r.T) for r in stepped]:
            raise TargetError("rows", "are not the last step's rows")
        for i, r in enumerate(rows):
            if not self._pad(r) and not r.is_prefill and not 0 <= r.accepted <= r.T:
                raise TargetError(f"rows[{i}].accepted", f"is {r.accepted}, outside [0, {r.T}]")
        self.last = None
        if self.fault == "commit_one_call_late":  # this commit waits for the next one; the last one runs now
            (rows, payload), self.deferred = self.deferred or ([], []), (rows, payload)
        for i, r in enumerate(rows):
            if self._pad(r) or r.is_prefill or r.write_slot == -1:
                continue
            n = r.accepted - 1 if self.fault == "off_by_one_accepted" and r.accepted >= 1 else r.accepted
            if self.fault == "width_capped_at_8":
                n = min(n, WIDTH_CAP)
            if n == 0:
                continue  # nothing committed: the slot's bytes stay as they are
            for l in range(self.L):
                self._replay(l, r.slot, r.write_slot, payload[l][i], n)
                if self.fault == "decode_path_drift" and r.T == 1:  # the decode kernel's own state update
                    S = self._get(l, r.write_slot)
                    self._put(l, r.write_slot, (S * np.float32(1.0 - DECODE_DRIFT)).astype(np.float32))

    def capture(self, rows: int, T: int) -> None:
        """A new bucket warmed up on dummy inputs: `rows` PAD rows of T tokens through the step, outputs and
        payload discarded (PAD rows read and write no state). The capture_writes_live_state fault runs the
        warm-up on the last step's rows instead and commits its whole dummy window into their slots."""
        pad = self.index_buffer[:rows] if self.fault == "capture_writes_live_state" else []
        warm = [dataclasses.replace(r, T=T, token_offset=i * T, accepted=0, kind="verify", fresh=False)
                for i, r in enumerate(pad)]
        if not warm:
            warm = [Row(slot=-1, write_slot=-1, T=T, token_offset=i * T, accepted=0, kind="verify", fresh=False,
                        graph_tail=True) for i in range(rows)]
        n, c = len(warm) * T, self.cfg
        rng = np.random.default_rng(0xCA97)
        dummy = {"q": (n, c["H"], c["K"]), "k": (n, c["H"], c["K"]), "v": (n, c["HV"], c["V"]),
                 "a": (n, c["HV"], 1 if c["op"] == "gdn" else c["K"]), "b": (n, c["HV"])}
        inputs = [{k: rng.standard_normal(shape).astype(np.float32) * 0.5 for k, shape in dummy.items()}
                  for _ in range(self.L)]
        index_buffer = self.index_buffer
        self.step(warm, inputs)
        if self.fault == "capture_writes_live_state":
            self.commit([dataclasses.replace(r, accepted=T) for r in warm])
        self.last = None
        self.index_buffer = index_buffer  # the capture's rows are not the engine's batch
        self.graphs[(rows, T)] = CapturedGraph(rows, T, self.fault)  # a new graph: its buffers not yet filled

    def copy_slot(self, src: int, dst: int) -> None:
        for pool in self.pools:
            pool[dst, : self.E] = pool[src, : self.E]
        if self.conv is not None:
            self.conv.copy(src, dst)

    # --- the conv component (protocol 1.5): numpy_conv_slots.py ----------------------------------------------
    def conv_step(self, rows: list, x: list) -> list:
        self._check(rows, x[0].shape[0])
        return self.conv.step(rows, x)

    def conv_commit(self, rows: list) -> None:
        self.conv.commit(rows)

    def conv_committed_state(self, layer: int, slot: int) -> np.ndarray:
        return self.conv.window(layer, slot)

    def conv_pool(self, layer: int) -> np.ndarray:
        return self.conv.pools[layer]

    def committed_state(self, layer: int, slot: int) -> np.ndarray:
        return self.pools[layer][slot, : self.E].reshape(self.shape)

    def pool(self, layer: int) -> np.ndarray:
        return self.pools[layer]

    # --- MRoPE positions (protocol 1.10): numpy_mrope.py -----------------------------------------------------------
    def mrope_setup(self, config: dict, q_heads: int, k_heads: int) -> None:
        self.mrope.setup(config, q_heads, k_heads)

    def mrope_admit(self, req: int, segments: list, cached: int = 0) -> None:
        self.mrope.admit(req, segments, cached)

    def mrope_step(self, rows: list, q: np.ndarray, k: np.ndarray) -> tuple:
        return self.mrope.step(rows, q, k)

    def mrope_accept(self, rows: list) -> None:
        self.mrope.accept(rows)

    def mrope_release(self, req: int) -> None:
        self.mrope.release(req)

    def fixture(self, op: str, config: dict, inputs: dict) -> dict:
        if op in MROPE_FIXTURE_OPS:
            return run_rotary_fixture(config, inputs)
        if op in TREE_OPS:
            return run_tree_op(op, config, inputs, self.fault)
        return run_fixture_op(op, config, inputs, self.fault)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fault", choices=FAULTS, default=None, help="seed one bookkeeping bug")
    ap.add_argument("--claims", choices=("all", "nothing", "unexercisable"), default="all",
                    help="what the example claims: everything it does (all), no op (nothing), or the mtp_verify "
                         "fixture op at BF16 activations and state, which no committed fixture has (unexercisable)")
    ap.add_argument("--step-mix", choices=tuple(STEP_MIXES), default="any",
                    help="what one step may mix for this kernel, claimed as step_mix (protocol 1.7): any (the "
                         "default), one width per step, prefill chunks apart from verify rows, or both; a step that "
                         "mixes more is refused")
    args = ap.parse_args(argv)
    return serve(NumpyReplay(args.fault, args.claims, args.step_mix))


if __name__ == "__main__":
    sys.exit(main())
