"""The fixture ops (docs/fixture-format.md; reference/golden.hpp lists their tensors) in float32 NumPy, over the
token step of replay_math.Recurrence: what examples/numpy_replay.py answers to the protocol's `fixture` command.

  recurrent, chunked   in.q/k/v/a/b [T, ...], in.state           -> out.o [T, HV, V], out.state
  mtp_verify           the same                                  -> out.o, out.states [T, state shape]
  replay_commit        in.k/v/a/b [T, ...], in.state, in.accepted -> out.state (n = 0: in.state unchanged)
  mtp_batch            in.pool [S, state shape], in.slot [B] (-1 = PAD), in.accepted [B], in.q/... [B, T, ...]
                                                                  -> out.o [B, T, HV, V], out.pool

States are [HV, K, V] (layout "kv") or [HV, V, K] ("vk") in the tensors and [HV, K, V] in the math; they are
carried in float32 and rounded to the state dtype once where they are stored. Outputs are rounded to the
activation dtype, as a kernel stores them. `chunked` runs the token recurrence over the whole sequence: the
chunk size changes a kernel's summation order, not the result it must reach, and this example does not
implement the chunk-parallel (WY) form. None of this shares code with the C++ reference.

The conv fixture ops (conv.prefill, conv.update, conv.commit: the short convolution before q, k, v) are in
numpy_conv_ops.py; run_fixture_op dispatches to them.

Seeded faults (numpy_replay.py --fault F): replay_commit_drops_last: replay_commit replays n - 1 of the n
accepted tokens (an off-by-one in the accepted prefix); conv_commit_keeps_window_tail (numpy_conv_ops.py):
conv.commit keeps the whole window's last W - 1 columns. Every other op is unaffected by either.
"""

from __future__ import annotations

import numpy as np

from numpy_conv_ops import CONV_FAULTS, CONV_OPS, run_conv_op
from replay_math import Recurrence, round_bf16
from replayssm_kit.target import TargetError

FIXTURE_FAULTS = ("replay_commit_drops_last",) + CONV_FAULTS


class FixtureOps:
    def __init__(self, config: dict, inputs: dict, fault: str | None = None):
        if not isinstance(config.get("model"), dict):
            raise TargetError("config.model", "is missing")
        self.m = m = config["model"]
        self.args = config.get("args") or {}
        self.x = inputs
        self.fault = fault
        self.math = Recurrence(m, fault == "l2norm_eps_outside_sqrt")
        self.HV, self.K, self.V = m["HV"], m["K"], m["V"]
        self.kv = m["layout"] == "kv"
        self.params = (self._need("param.A_log"), self._need("param.dt_bias").reshape(self.HV, -1))

    def _need(self, name: str) -> np.ndarray:
        if name not in self.x:
            raise TargetError(name, "is missing from the command")
        return self.x[name]

    # --- layouts and stores --------------------------------------------------------------------------------
    def _to_math(self, s: np.ndarray) -> np.ndarray:
        s = s.reshape((self.HV, self.K, self.V) if self.kv else (self.HV, self.V, self.K))
        return np.array(s if self.kv else s.transpose(0, 2, 1), dtype=np.float32, order="C")

    def _store_state(self, S: np.ndarray) -> np.ndarray:
        out = S if self.kv else S.transpose(0, 2, 1)
        return round_bf16(out) if self.m["state_dtype"] == "BF16" else np.array(out, dtype=np.float32)

    def _store_o(self, o: np.ndarray) -> np.ndarray:
        return round_bf16(o) if self.m["act_dtype"] == "BF16" else o

    # --- the token loop ------------------------------------------------------------------------------------
    def _run(self, S, k, v, a, b, q=None, keep_states=False):
        """Advances S over the tokens; returns (outputs [T, HV, V] or None, stored states after each token)."""
        T = k.shape[0]
        a = a.reshape(T, self.HV, -1)
        o = np.zeros((T, self.HV, self.V), dtype=np.float32) if q is not None else None
        states = []
        for t in range(T):
            y = self.math.token(S, self.params, k[t], v[t], a[t], b[t], None if q is None else q[t])
            if o is not None:
                o[t] = y
            if keep_states:
                states.append(self._store_state(S))
        return o, states

    def _sequence(self):
        return tuple(self._need("in." + n) for n in ("q", "k", "v", "a", "b"))

    def recurrent(self):
        q, k, v, a, b = self._sequence()
        S = self._to_math(self._need("in.state"))
        o, _ = self._run(S, k, v, a, b, q)
        return {"out.o": self._store_o(o), "out.state": self._store_state(S)}

    def chunked(self):
        chunk = self.args.get("chunk")
        if type(chunk) is not int or chunk < 1:
            raise TargetError("config.args.chunk", f"must be a positive integer, got {chunk!r}")
        return self.recurrent()

    def mtp_verify(self):
        q, k, v, a, b = self._sequence()
        o, states = self._run(self._to_math(self._need("in.state")), k, v, a, b, q, keep_states=True)
        return {"out.o": self._store_o(o), "out.states": np.stack(states)}

    def replay_commit(self):
        k, v, a, b = (self._need("in." + n) for n in ("k", "v", "a", "b"))
        n = int(np.asarray(self._need("in.accepted")).reshape(()))
        if not 0 <= n <= k.shape[0]:
            raise TargetError("in.accepted", f"is {n}, outside [0, {k.shape[0]}]")
        if n == 0:
            return {"out.state": self._need("in.state")}  # nothing committed: the state as it was
        if self.fault == "replay_commit_drops_last":
            n -= 1
        S = self._to_math(self._need("in.state"))
        self._run(S, k[:n], v[:n], a[:n], b[:n])
        return {"out.state": self._store_state(S)}

    def mtp_batch(self):
        q, k, v, a, b = self._sequence()
        pool = np.array(self._need("in.pool"), dtype=np.float32, copy=True)
        slots = np.asarray(self._need("in.slot")).reshape(-1)
        accepted = np.asarray(self._need("in.accepted")).reshape(-1)
        B, T = q.shape[:2]
        o = np.zeros((B, T, self.HV, self.V), dtype=np.float32)  # PAD rows output zeros
        commits = []
        for r in range(B):
            s, n = int(slots[r]), int(accepted[r])
            if s == -1:
                continue  # PAD: reads and writes no state
            if not 0 <= s < pool.shape[0]:
                raise TargetError(f"in.slot[{r}]", f"is {s}, outside [-1, {pool.shape[0]})")
            if not 0 <= n <= T:
                raise TargetError(f"in.accepted[{r}]", f"is {n}, outside [0, {T}]")
            o[r], states = self._run(self._to_math(pool[s]), k[r], v[r], a[r], b[r], q[r], keep_states=True)
            if n > 0:
                commits.append((s, states[n - 1]))
        for s, state in commits:  # every row read its checkpoint before any commit writes
            pool[s] = state
        return {"out.o": self._store_o(o), "out.pool": pool}


def run_fixture_op(op: str, config: dict, inputs: dict, fault: str | None = None) -> dict:
    if op in CONV_OPS:
        return run_conv_op(op, config, inputs, fault)
    ops = FixtureOps(config, inputs, fault)
    if op not in ("recurrent", "chunked", "mtp_verify", "replay_commit", "mtp_batch"):
        raise TargetError("fixture_op", f"{op!r} is not implemented")
    return getattr(ops, op)()
