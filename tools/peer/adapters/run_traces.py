"""Replays the committed trace fixtures through a peer adapter in process (replayssm_kit.replay, no CLI) three
times: twice as recorded and once with every step's batch rows reversed, and checks that the runs answered the
same bits (determinism of the peer on identical command sequences, and independence of the row order). One
line per trace; exit 1 when a covered trace fails, two identical runs differ, or the reversed run fails.

    python3 tools/peer/adapters/run_traces.py fla_spec [--tier T] [--dir fixtures/traces] -- --peer-src DIR
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402,F401  (puts replayssm_kit on the path)
import numpy as np  # noqa: E402
from replayssm_kit.replay import replay_trace  # noqa: E402
from replayssm_kit.target import Target  # noqa: E402
from replayssm_kit.trace import find_traces  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


class Recorder(Target):
    """Passes every call to `inner` and keeps the bits of every answer (outputs, committed states, pools); the
    outputs of PAD rows are kept as zeros unless the target claims them (common.live_outputs: don't-care)."""

    def __init__(self, inner: Target, l2norms: list):
        self.inner, self.log, self.l2norms = inner, [], l2norms

    def _keep(self, what, x):
        arr = x.detach().float().cpu().numpy() if hasattr(x, "detach") else np.asarray(x, dtype=np.float32)
        self.log.append((what, arr.tobytes()))
        return x

    def capabilities(self):
        caps = dict(self.inner.capabilities())
        if self.l2norms:
            caps["l2norms"] = sorted(set(caps.get("l2norms", [])) | set(self.l2norms))
        return caps

    def setup(self, setup, params):
        return self.inner.setup(setup, params)

    def allocate(self, slot):
        return self.inner.allocate(slot)

    def step(self, rows, inputs):
        outs = self.inner.step(rows, inputs)
        for o in outs:
            self._keep("o", common.live_outputs(o, rows, self.caps()))
        return outs

    def caps(self):
        if not hasattr(self, "_caps"):
            self._caps = self.inner.capabilities()
        return self._caps

    def commit(self, rows):
        return self.inner.commit(rows)

    def copy_slot(self, src, dst):
        return self.inner.copy_slot(src, dst)

    def committed_state(self, layer, slot):
        return self._keep(f"state {layer} {slot}", self.inner.committed_state(layer, slot))

    def pool(self, layer):
        return self._keep(f"pool {layer}", self.inner.pool(layer))


class Permuted(Recorder):
    """Serves every step with its batch rows in reverse order (windows repacked to match) and answers in the
    judge's order, so the recorded bits must equal an unpermuted run's when the peer's result does not depend on
    which program or launch position a row gets."""

    def step(self, rows, inputs):
        import dataclasses

        order = list(reversed(range(len(rows))))
        new_rows, at = [], 0
        for i in order:
            new_rows.append(dataclasses.replace(rows[i], token_offset=at))
            at += rows[i].T
        take = np.concatenate([np.arange(rows[i].token_offset, rows[i].token_offset + rows[i].T) for i in order]
                              ).astype(np.int64) if rows else np.zeros(0, np.int64)
        self.perm = order
        outs = self.inner.step(new_rows, [{k: v[take] for k, v in x.items()} for x in inputs])
        back = np.argsort(take, kind="stable")
        res = []
        for o in outs:
            o = o.detach().float().cpu().numpy() if hasattr(o, "detach") else np.asarray(o, dtype=np.float32)
            o = o.reshape(len(take), -1)[back].reshape(o.shape)
            self._keep("o", common.live_outputs(o, rows, self.caps()))
            res.append(o)
        return res

    def commit(self, rows):
        return self.inner.commit([rows[i] for i in self.perm])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    rest = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("adapter", help="module name in tools/peer/adapters (fla_spec, vllm_spec_ring)")
    ap.add_argument("--dir", default=os.path.join(REPO, "fixtures", "traces"))
    ap.add_argument("--tier", default=None, help="judge at this tier instead of the adapter's claim")
    ap.add_argument("--accept-l2norm", action="append", default=[],
                    help="judge traces of this l2norm form too (rsqrt_mul / div_sqrt: x*(1/sqrt(s)) and x/sqrt(s) are "
                         "one fp32 rounding apart, inside every tier's bound; printed with each result)")
    args = ap.parse_args(own)
    mod = importlib.import_module(args.adapter)
    target = mod.build(rest)
    bad = 0
    counts = {"ok": 0, "FAIL": 0, "NOT COVERED": 0, "NONDETERMINISTIC": 0}
    t0 = time.time()
    for path in find_traces(args.dir):
        runs = []
        for kind in (Recorder, Recorder, Permuted):
            rec = kind(target, args.accept_l2norm)
            res = replay_trace(path, rec, tier=args.tier)
            runs.append((res, rec.log))
        res = runs[0][0]
        rel = os.path.relpath(path, REPO)
        if not res.covered:
            counts["NOT COVERED"] += 1
            print(f"NOT COVERED {rel}: {res.not_covered}")
            continue
        same = runs[0][1] == runs[1][1]
        perm_same = runs[0][1] == runs[2][1]
        perm_ok = runs[2][0].ok
        if not res.ok:
            bad += 1
            counts["FAIL"] += 1
        else:
            counts["ok"] += 1
        if not same:
            bad += 1
            counts["NONDETERMINISTIC"] += 1
        if not perm_same:
            counts["ORDER-DEPENDENT"] = counts.get("ORDER-DEPENDENT", 0) + 1
            if not perm_ok:
                bad += 1
        print(res.summary().replace(path, rel)
              + ("" if same else "\n        NONDETERMINISTIC: two runs answered different bits")
              + ("" if perm_same else f"\n        ORDER-DEPENDENT: reversed batch rows answered different bits "
                                      f"({'still within the tier' if perm_ok else 'and FAILED: ' + runs[2][0].summary()})"))
    accepted = f" (l2norm forms accepted besides the adapter's: {args.accept_l2norm})" if args.accept_l2norm else ""
    print(f"{args.adapter}: {counts} in {time.time() - t0:.1f} s{accepted}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
