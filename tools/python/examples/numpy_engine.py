"""A small serving engine in NumPy, judged at the engine level (docs/target-protocol.md, "Engine level"):

    replayssm fuzz --level engine --target exec:'python3 tools/python/examples/numpy_engine.py' --preset tiny-gdn

It owns its bookkeeping: the lowest free slot per request, in-place commits in the step itself, copy-on-write
by copying, the accepted run trimmed at the stop token and at max_new (the earlier wins), recompute-mode
preemption (the history is prefilled again from zero on resume). The math is replay_math's float32 token step;
a committed state is rounded once to the state dtype.

Prefix snapshots (protocol 0.2, setup option `block` = B > 0), by the track step rule of docs/lifecycle.md:
when a committed call (a prefill chunk or a verify commit) takes a request from c0 to c1 committed tokens with
c1 // B > c0 // B, its snapshot becomes the state after exactly X = c1 // B * B tokens (the call's per-token
state X - c0, rounded once to the state dtype), written into a slot of the request's own (listed in its slot
map); rejected drafts never count, and a request the step ends takes none. A snapshot goes when its request
stops running or is re-prefilled from zero; a fork or prefix hit starts without one. `snapshot_hit` copies the
donor's snapshot into a fresh slot (copy-on-write) and continues with the donor's first X tokens as history.
`migrate` moves a request's state and snapshot to other free slots. `--claims none` claims neither capability
(an engine as before 0.2).

Seeded faults (the judge must catch each):
  tokens_after_stop         H11: the stop token is ignored when trimming (the run is cut at max_new only, so
                            tokens after the end-of-generation token are committed)
  snapshot_at_run_end       H10: the snapshot is the state after the whole committed call (c1 tokens), not at
                            the block boundary X it crossed
  migration_drops_snapshot  H16: a migration moves the committed state and leaves the snapshot behind (the
                            request keeps no snapshot afterwards)
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

FAULTS = ("tokens_after_stop", "snapshot_at_run_end", "migration_drops_snapshot")
NAMES = ("q", "k", "v", "a", "b")


def cat(x: list, y: list) -> list:
    return [{n: np.concatenate([a[n], b[n]]) for n in NAMES} for a, b in zip(x, y)]


def cut(x: list, t0: int, t1: int) -> list:
    return [{n: a[n][t0:t1] for n in NAMES} for a in x]


class NumpyEngine(EngineTarget):
    def __init__(self, fault: str | None = None, claims: bool = True):
        self.fault, self.claims = fault, claims

    def capabilities(self) -> dict:
        return {"name": "numpy-engine" + (f"+{self.fault}" if self.fault else ""), "tier": "fp32", "bit_exact": False,
                "prefix_snapshots": self.claims, "migrates": self.claims}

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
        self.block = options.get("block", 0)
        if type(self.block) is not int or self.block < 0 or (self.block and not self.claims):
            raise TargetError("options.block", f"is {self.block!r}: not a prefix-cache block this engine keeps")
        self.reqs = {}

    # --- slots ---------------------------------------------------------------------------------------------
    def _get(self, l, slot):
        s = self.pools[l][slot, : self.E].reshape(self.shape)
        return np.array(s if self.kv else s.transpose(0, 2, 1), dtype=np.float32, order="C")

    def _put(self, l, slot, S):
        S = round_bf16(S) if self.bf16 else S
        self.pools[l][slot, : self.E] = (S if self.kv else S.transpose(0, 2, 1)).reshape(-1)

    def _copy(self, dst, src):
        for l in range(self.L):
            self.pools[l][dst, : self.E] = self.pools[l][src, : self.E]

    def _slots(self, r) -> list:
        return [r["slot"]] + ([r["snap_slot"]] if r["snap_slot"] is not None else [])

    def _alloc(self, exclude=frozenset()) -> int:
        used = {s for r in self.reqs.values() if r["status"] == "running" for s in self._slots(r)} | set(exclude)
        for s in range(self.S):
            if s not in used:
                return s
        raise TargetError("slots", "no free slot")

    @staticmethod
    def _drop_snapshot(r):
        r.update(snap_slot=None, snap=0)

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
                          "fresh": True, "generated": 0, "max_new": max_new, "snap_slot": None, "snap": 0}

    def _derive(self, req, source):
        src = self._req(source)
        if req in self.reqs or src["pending"][0]["q"].shape[0]:
            raise TargetError("req", f"cannot derive request {req} from {source}")
        r = dict(src, slot=self._alloc(), snap_slot=None, snap=0)  # the snapshot stays the donor's
        self._copy(r["slot"], src["slot"])
        self.reqs[req] = r
        return r

    def fork(self, req, source):
        self._derive(req, source)

    def prefix_hit(self, req, source, prompt, max_new):
        r = self._derive(req, source)
        r.update(pending=prompt, generated=0, max_new=max_new)

    def snapshot_hit(self, req, source, prompt, max_new):
        src = self._req(source)
        if req in self.reqs or not src["snap"]:
            raise TargetError("from", f"request {source} holds no prefix snapshot for request {req}")
        r = {"status": "running", "slot": self._alloc(), "history": cut(src["history"], 0, src["snap"]),
             "pending": prompt, "fresh": False, "generated": 0, "max_new": max_new, "snap_slot": None, "snap": 0}
        self._copy(r["slot"], src["snap_slot"])  # copy-on-write: the donor's snapshot stays where it is
        self.reqs[req] = r

    def migrate(self, req):
        r = self._req(req)
        slot = self._alloc()  # free slots only: the request's own stay taken until it has moved
        snap_slot = self._alloc(exclude={slot}) if r["snap_slot"] is not None else None
        self._copy(slot, r["slot"])
        r["slot"] = slot
        if snap_slot is None:
            return
        if self.fault == "migration_drops_snapshot":
            self._drop_snapshot(r)
            return
        self._copy(snap_slot, r["snap_slot"])
        r["snap_slot"] = snap_slot

    def finish(self, req):
        r = self._req(req)
        r["status"] = "finished"
        self._drop_snapshot(r)

    def preempt(self, req):
        r = self._req(req)
        r["status"] = "preempted"
        self._drop_snapshot(r)

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
            c0 = r["history"][0]["q"].shape[0]
            if n:
                for l in range(self.L):
                    self._put(l, r["slot"], states[l][n - 1])
                r["history"] = cat(r["history"], cut(tokens, 0, n))
            B = self.block
            # The track step: the last boundary this commit crossed (not for a request this step ends: its
            # snapshot would go at once, and a slot nobody holds after the step must not be written).
            if B and (c0 + n) // B > c0 // B and not ends:
                X = (c0 + n) // B * B
                at = n if self.fault == "snapshot_at_run_end" else X - c0
                if r["snap_slot"] is None:
                    r["snap_slot"] = self._alloc()
                for l in range(self.L):
                    self._put(l, r["snap_slot"], states[l][at - 1])
                r["snap"] = X
            if ends:
                r["status"] = "finished"
                self._drop_snapshot(r)
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
        return {q: self._slots(r) for q, r in self.reqs.items() if r["status"] == "running"}

    def snapshot(self, req, layer):
        r = self._req(req)
        if layer is None or not r["snap"]:
            return r["snap"], None
        return r["snap"], self.pools[layer][r["snap_slot"], : self.E].reshape(self.shape)

    def pool(self, layer):
        return self.pools[layer]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fault", choices=FAULTS, default=None, help="seed one bookkeeping bug")
    ap.add_argument("--claims", choices=("all", "none"), default="all",
                    help="claim prefix_snapshots and migrates (all) or neither (none: an engine as before 0.2)")
    args = ap.parse_args(argv)
    return serve_engine(NumpyEngine(args.fault, args.claims == "all"))


if __name__ == "__main__":
    sys.exit(main())
