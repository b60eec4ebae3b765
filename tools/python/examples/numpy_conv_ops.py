"""The short convolution's fixture ops (docs/fixture-format.md section 11) in float32 NumPy: what
examples/numpy_replay.py answers to the protocol's `fixture` command for conv.prefill, conv.update and
conv.commit (protocol 1.3).

Per channel c, with the state S (W - 1 columns, column 0 the oldest) and the raw inputs x_1 .. x_T of a window,
the extended window is E = [S | x_1 .. x_T] and

  y_t[c] = act(bias[c] + sum_j weight[c][j] * E[c][t - 1 + j])   (weight[c][W-1] meets the current token)
  state after token t = the last W - 1 columns of [S | x_1 .. x_t], rounded to the state dtype
  commit of n accepted tokens = the state after token n (n = 0: S, untouched)

  conv.prefill  in.x [T, C], in.state [C, W-1], param.weight [C, W], [param.bias [C]] -> out.y [T, C], out.state
  conv.update   the same                                                            -> out.y, out.states [T, C, W-1]
  conv.commit   in.state, in.x, in.accepted                                         -> out.state

Channels C = 2*H*K + HV*V. Arithmetic in float32: the sum starts at the bias and adds the taps oldest first,
one rounding per operation; SiLU is z / (1 + exp(-z)); outputs are rounded once to the activation dtype.
Written from the formulas above; nothing here is shared with the C++ reference or the kit's test reference.

Seeded fault (numpy_replay.py --fault conv_commit_keeps_window_tail): conv.commit keeps the last W - 1 columns
of the whole window, as if every draft token were accepted, instead of the columns ending at token n. It must
fail exactly the commit fixtures with n < T; prefill, update and n = T commits are unaffected.
"""

from __future__ import annotations

import numpy as np

from replay_math import round_bf16
from replayssm_kit.target import TargetError

CONV_OPS = ("conv.prefill", "conv.update", "conv.commit")
CONV_FAULTS = ("conv_commit_keeps_window_tail",)


class ConvOps:
    def __init__(self, config: dict, inputs: dict, fault: str | None = None):
        cfg = config.get("conv")
        if not isinstance(cfg, dict):
            raise TargetError("config.conv", "is missing")
        for key in ("H", "HV", "K", "V", "channels", "kernel_size", "activation", "bias", "act_dtype", "state_dtype"):
            if key not in cfg:
                raise TargetError(f"config.conv.{key}", "is missing")
        self.C = cfg["channels"]
        if self.C != 2 * cfg["H"] * cfg["K"] + cfg["HV"] * cfg["V"]:
            raise TargetError("config.conv.channels", f"is {self.C}, not 2*H*K + HV*V")
        self.W = cfg["kernel_size"]
        if type(self.W) is not int or not 2 <= self.W <= 8:
            raise TargetError("config.conv.kernel_size", f"is {self.W!r}, outside [2, 8]")
        if cfg["activation"] not in ("silu", "none"):
            raise TargetError("config.conv.activation", f"is {cfg['activation']!r}, not silu or none")
        self.silu = cfg["activation"] == "silu"
        self.has_bias = bool(cfg["bias"])
        self.act_bf16 = cfg["act_dtype"] == "BF16"
        self.state_bf16 = cfg["state_dtype"] == "BF16"
        self.inputs = inputs
        self.fault = fault
        self.x = self._need("in.x", None)
        if self.x.ndim != 2 or self.x.shape[1] != self.C:
            raise TargetError("in.x", f"has shape {list(self.x.shape)}, expected [T, {self.C}]")
        self.T = self.x.shape[0]
        self.S = self._need("in.state", (self.C, self.W - 1))

    def _need(self, name: str, shape) -> np.ndarray:
        if name not in self.inputs:
            raise TargetError(name, "is missing from the command")
        a = np.asarray(self.inputs[name])
        if shape is not None and a.shape != shape:
            raise TargetError(name, f"has shape {list(a.shape)}, expected {list(shape)}")
        return a

    def _store_state(self, cols: np.ndarray) -> np.ndarray:
        cols = np.array(cols, dtype=np.float32, order="C")
        return round_bf16(cols) if self.state_bf16 else cols

    def _extended(self) -> np.ndarray:
        """E = [S | x_1 .. x_T], [C, W - 1 + T]: the state as stored, the window's own x unrounded."""
        return np.concatenate([self.S.astype(np.float32), self.x.T.astype(np.float32)], axis=1)

    def _outputs(self, E: np.ndarray) -> np.ndarray:
        w = self._need("param.weight", (self.C, self.W)).astype(np.float32)
        if self.has_bias != ("param.bias" in self.inputs):
            raise TargetError("param.bias", "contradicts config.conv.bias")
        bias = self._need("param.bias", (self.C,)).astype(np.float32) if self.has_bias else None
        y = np.empty((self.T, self.C), dtype=np.float32)
        for t in range(self.T):
            z = bias.copy() if bias is not None else np.zeros(self.C, dtype=np.float32)
            for j in range(self.W):  # oldest tap first, the current token last
                z = z + w[:, j] * E[:, t + j]
            if self.silu:
                with np.errstate(over="ignore"):
                    z = z / (np.float32(1) + np.exp(-z))
            y[t] = z
        return round_bf16(y) if self.act_bf16 else y

    def _state_after(self, E: np.ndarray, n: int) -> np.ndarray:
        return self._store_state(E[:, n:n + self.W - 1])

    def prefill(self) -> dict:
        E = self._extended()
        return {"out.y": self._outputs(E), "out.state": self._state_after(E, self.T)}

    def update(self) -> dict:
        E = self._extended()
        return {"out.y": self._outputs(E), "out.states": np.stack([self._state_after(E, t + 1) for t in range(self.T)])}

    def commit(self) -> dict:
        n = int(np.asarray(self._need("in.accepted", None)).reshape(()))
        if not 0 <= n <= self.T:
            raise TargetError("in.accepted", f"is {n}, outside [0, {self.T}]")
        if self.fault == "conv_commit_keeps_window_tail":
            n = self.T
        if n == 0:
            return {"out.state": self.S}  # nothing accepted: the checkpoint's bytes
        return {"out.state": self._state_after(self._extended(), n)}


def run_conv_op(op: str, config: dict, inputs: dict, fault: str | None = None) -> dict:
    ops = ConvOps(config, inputs, fault)
    return {"conv.prefill": ops.prefill, "conv.update": ops.update, "conv.commit": ops.commit}[op]()
