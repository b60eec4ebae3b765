"""A small serving engine in NumPy, judged at the engine level (docs/target-protocol.md, "Engine level"):

    replayssm fuzz --level engine --target exec:'python3 tools/python/examples/numpy_engine.py' --preset tiny-gdn

It owns its bookkeeping: the lowest free slot per request, in-place commits in the step itself, copy-on-write
by copying, the accepted run trimmed at the stop token and at max_new (the earlier wins), recompute-mode
preemption (the history is prefilled again from zero on resume). The math is replay_math's float32 token step;
a committed state is rounded once to the state dtype.

`--fault tokens_after_stop` seeds the H11 slip: the stop token is ignored when trimming (the run is cut at
max_new only, so tokens after the end-of-generation token are committed); the judge must catch it.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from replay_math import Recurrence, round_bf16  # noqa: E402
from replayssm_kit.engine import EngineTarget, serve_engine  # noqa: E402
from replayssm_kit.target import TargetError  # noqa: E402

FAULTS = ("tokens_after_stop",)
NAMES = ("q", "k", "v", "a", "b")


def cat(x: list, y: list) -> list:
    return [{n: np.concatenate([a[n], b[n]]) for n in NAMES} for a, b in zip(x, y)]


def cut(x: list, t0: int, t1: int) -> list:
    return [{n: a[n][t0:t1] for n in NAMES} for a in x]


class NumpyEngine(EngineTarget):
    def __init__(self, fault: str | None = None):
        self.fault = fault

    def capabilities(self) -> dict:
        return {"name": "numpy-engine" + (f"+{self.fault}" if self.fault else ""), "tier": "fp32", "bit_exact": False}

    def setup(self, setup: dict, options: dict, params: list) -> None:
        cfg = setup["config"]
        self.math, self.params = Recurrence(cfg), params
        self.L, self.S, self.max_T = cfg["num_layers"], setup["num_slots"], setup["max_T"]
        self.E = cfg["HV"] * cfg["K"] * cfg["V"]
        self.stride = setup["slot_stride"] or self.E
        self.kv, self.bf16 = cfg["layout"] == "kv", cfg["state_dtype"] == "BF16"
        self.math_shape = (cfg["HV"], cfg["K"], cfg["V"])
        self.shape = self.math_shape if self.kv else (cfg["HV"], cfg["V"], cfg["K"])
        self.pools = [np.full((self.S, self.stride), setup["poison"], dtype=np.float32) for _ in range(self.L)]
        self.reqs = {}

    # --- slots ---------------------------------------------------------------------------------------------
    def _get(self, l, slot):
        s = self.pools[l][slot, : self.E].reshape(self.shape)
        return np.array(s if self.kv else s.transpose(0, 2, 1), dtype=np.float32, order="C")

    def _put(self, l, slot, S):
        S = round_bf16(S) if self.bf16 else S
        self.pools[l][slot, : self.E] = (S if self.kv else S.transpose(0, 2, 1)).reshape(-1)

    def _alloc(self) -> int:
        used = {r["slot"] for r in self.reqs.values() if r["status"] == "running"}
        for s in range(self.S):
            if s not in used:
                return s
        raise TargetError("slots", "no free slot")

    def _req(self, req, status="running"):
        r = self.reqs.get(req)
        if r is None or r["status"] != status:
            raise TargetError("req", f"request {req} is not {status}")
        return r

    # --- events --------------------------------------------------------------------------------------------
    def admit(self, req, prompt, max_new):
        if req in self.reqs:
            raise TargetError("req", f"request {req} already exists")
        self.reqs[req] = {"status": "running", "slot": self._alloc(), "history": cut(prompt, 0, 0), "pending": prompt,
                          "fresh": True, "generated": 0, "max_new": max_new}

    def _derive(self, req, source):
        src = self._req(source)
        if req in self.reqs or src["pending"][0]["q"].shape[0]:
            raise TargetError("req", f"cannot derive request {req} from {source}")
        r = dict(src, slot=self._alloc())
        for l in range(self.L):
            self.pools[l][r["slot"], : self.E] = self.pools[l][src["slot"], : self.E]
        self.reqs[req] = r
        return r

    def fork(self, req, source):
        self._derive(req, source)

    def prefix_hit(self, req, source, prompt, max_new):
        r = self._derive(req, source)
        r.update(pending=prompt, generated=0, max_new=max_new)

    def finish(self, req):
        self._req(req)["status"] = "finished"

    def preempt(self, req):
        self._req(req)["status"] = "preempted"

    def resume(self, req):
        r = self._req(req, "preempted")
        r.update(status="running", slot=self._alloc(), pending=cat(r["history"], r["pending"]),
                 history=cut(r["history"], 0, 0), fresh=True)

    def step(self, entries, windows):
        out = []
        for e, window in zip(entries, windows):
            r = self._req(e["req"])
            left = r["pending"][0]["q"].shape[0]
            if left:
                n = min(e["T"], left)
                tokens, r["pending"] = cut(r["pending"], 0, n), cut(r["pending"], n, left)
            else:
                tokens = window
            outs, states = [], []
            for l in range(self.L):
                # The math works on [HV, K, V] whatever the pool's layout; a fresh prefill starts from zero.
                S = np.zeros(self.math_shape, np.float32) if r["fresh"] and left else self._get(l, r["slot"])
                x, o, after = tokens[l], [], []
                for t in range(x["q"].shape[0]):
                    o.append(self.math.token(S, self.params[l], x["k"][t], x["v"][t], x["a"][t], x["b"][t], x["q"][t]))
                    after.append(S.copy())
                outs.append(np.array(o, dtype=np.float32).reshape(-1, *self.math_shape[::2]))
                states.append(after)
            ends = False
            if left:
                n, r["fresh"] = tokens[0]["q"].shape[0], False
            else:
                budget = r["max_new"] - r["generated"]
                stop = e["eog_at"] if self.fault != "tokens_after_stop" else 0
                n = min(stop or e["accepted"], budget)
                ends = stop > 0 or (stop or e["accepted"]) >= budget
                r["generated"] += n
            if n:
                for l in range(self.L):
                    self._put(l, r["slot"], states[l][n - 1])
                r["history"] = cat(r["history"], cut(tokens, 0, n))
            if ends:
                r["status"] = "finished"
            out.append(outs)
        return out

    # --- queries -------------------------------------------------------------------------------------------
    def requests(self):
        return {q: {"status": r["status"], "committed": r["history"][0]["q"].shape[0],
                    "to_prefill": r["pending"][0]["q"].shape[0], "generated": r["generated"]}
                for q, r in self.reqs.items()}

    def committed_state(self, req, layer):
        return self.pools[layer][self._req(req)["slot"], : self.E].reshape(self.shape)

    def slot_map(self):
        return {q: [r["slot"]] for q, r in self.reqs.items() if r["status"] == "running"}

    def pool(self, layer):
        return self.pools[layer]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fault", choices=FAULTS, default=None, help="seed one bookkeeping bug")
    return serve_engine(NumpyEngine(ap.parse_args(argv).fault))


if __name__ == "__main__":
    sys.exit(main())
