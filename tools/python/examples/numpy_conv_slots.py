"""The conv component of the kernel-level lifecycle (protocol 1.5) in NumPy: a conv window per slot and layer,
what examples/numpy_replay.py answers to conv_step, conv_commit, conv_committed_state and conv_pool.

Per layer a pool of S windows [C, W-1] (channel-major, column 0 the oldest; C = 2*H*K + HV*V), each followed by
a 4-value gap that is never written, every value starting as the setup's poison. The arithmetic of one window
is numpy_conv_ops.py's (the formulas of docs/fixture-format.md section 11):

  conv_step    per real row: E = [window of the read slot (zeros for a fresh prefill row) | x_1 .. x_T]
               y_t = act(bias + sum_j weight[:, j] * E[:, t - 1 + j]), rounded to the activation dtype;
               a prefill row stores the last W - 1 columns of E (rounded to the conv state dtype) in write_slot
               at once, a verify row keeps (read window, x) until the commit; PAD / graph tail rows: zeros,
               nothing read or written.
  conv_commit  a verify row with n accepted tokens stores the last W - 1 columns of [window | x_1 .. x_n] in
               write_slot; n = 0 leaves the slot's bytes unchanged.

Seeded faults, each a slip engines have shipped (docs/lifecycle.md, "The conv state"), each caught by a
`--conv on` campaign (ctest exec_conv_state):
  conv_commit_keeps_window_tail (numpy_conv_ops.py): the commit keeps the columns ending at token T whatever n
      is, as if every draft were accepted (seen through the committed windows);
  conv_window_not_copied: copy_slot moves the recurrent state and leaves the conv window behind;
  conv_fresh_keeps_tenant_window: a fresh prefill starts from whatever window the slot holds, not from zeros.
"""

from __future__ import annotations

import numpy as np

from numpy_conv_ops import ConvOps
from replayssm_kit.target import TargetError

SLOT_FAULTS = ("conv_window_not_copied", "conv_fresh_keeps_tenant_window")


class ConvSlots:
    def __init__(self, setup: dict, fault: str | None = None):
        cfg, conv = setup["config"], setup["conv"]
        self.L, self.S = cfg["num_layers"], setup["num_slots"]
        self.C = 2 * cfg["H"] * cfg["K"] + cfg["HV"] * cfg["V"]
        self.W = conv["kernel_size"]
        self.w1 = self.C * (self.W - 1)
        self.config = {"conv": {"H": cfg["H"], "HV": cfg["HV"], "K": cfg["K"], "V": cfg["V"], "channels": self.C,
                                "kernel_size": self.W, "activation": conv["activation"], "bias": conv["bias"],
                                "act_dtype": cfg["act_dtype"], "state_dtype": conv["state_dtype"]}}
        self.params = setup["conv_params"]
        self.fault = fault
        self.pools = [np.full((self.S, self.w1 + 4), setup["poison"], dtype=np.float32) for _ in range(self.L)]
        self.pending = None  # per row, per layer: (write_slot, window, x) of the last step's verify rows

    def window(self, l: int, slot: int) -> np.ndarray:
        return self.pools[l][slot, : self.w1].reshape(self.C, self.W - 1).copy()

    def _ops(self, l: int, window: np.ndarray, x: np.ndarray, **more) -> ConvOps:
        p = self.params[l]
        inputs = {"in.x": x, "in.state": window, "param.weight": p["weight"], **more}
        if p["bias"] is not None:
            inputs["param.bias"] = p["bias"]
        return ConvOps(self.config, inputs, self.fault)

    def _put(self, l: int, slot: int, window: np.ndarray) -> None:
        self.pools[l][slot, : self.w1] = np.asarray(window, dtype=np.float32).reshape(-1)

    def step(self, rows: list, x: list) -> list:
        y = [np.zeros((xl.shape[0], self.C), dtype=np.float32) for xl in x]
        self.pending = [[None] * self.L for _ in rows]
        for i, r in enumerate(rows):
            if r.is_pad:
                continue
            fresh = r.is_prefill and r.fresh and self.fault != "conv_fresh_keeps_tenant_window"
            for l in range(self.L):
                window = np.zeros((self.C, self.W - 1), dtype=np.float32) if fresh else self.window(l, r.slot)
                xw = x[l][r.token_offset: r.token_offset + r.T]
                if r.is_prefill:
                    out = self._ops(l, window, xw).prefill()
                    if r.write_slot != -1:
                        self._put(l, r.write_slot, out["out.state"])
                else:
                    out = self._ops(l, window, xw).update()
                    self.pending[i][l] = (r.write_slot, window, xw)
                y[l][r.token_offset: r.token_offset + r.T] = out["out.y"]
        return y

    def commit(self, rows: list) -> None:
        if self.pending is None or len(self.pending) != len(rows):
            raise TargetError("rows", "are not the last conv_step's rows")
        pending, self.pending = self.pending, None
        for i, r in enumerate(rows):
            if r.is_pad or r.is_prefill:
                continue
            for l in range(self.L):
                if pending[i][l] is None:
                    raise TargetError(f"rows[{i}]", "was not a verify row of the last conv_step")
                write_slot, window, xw = pending[i][l]
                if not 0 <= r.accepted <= xw.shape[0]:
                    raise TargetError(f"rows[{i}].accepted", f"is {r.accepted}, outside [0, {xw.shape[0]}]")
                if write_slot == -1:
                    continue
                accepted = np.array(r.accepted, dtype=np.int32)
                state = self._ops(l, window, xw, **{"in.accepted": accepted}).commit()["out.state"]
                if r.accepted > 0 or self.fault == "conv_commit_keeps_window_tail":
                    self._put(l, write_slot, state)

    def copy(self, src: int, dst: int) -> None:
        if self.fault == "conv_window_not_copied":
            return
        for pool in self.pools:
            pool[dst, : self.w1] = pool[src, : self.w1]
