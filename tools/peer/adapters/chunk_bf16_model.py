"""The error a GDN chunk forward owes to bf16 storage alone, predicted from its operation order: the chunked
(WY / UT-transform) form of the gated delta rule computed in float64 NumPy, rounding to bf16 exactly where a
kernel with bf16 inputs stores or casts an intermediate, and compared with a `chunked` fixture's expectation
(the f64 truth rounded once). Nothing here runs or copies a peer; it is a model of an operation order:

    python3 tools/peer/adapters/chunk_bf16_model.py [--points all|none|NAME,...] FIXTURE...

Per chunk of C tokens and value head (docs/gdn-kda.md; Yang et al., "Gated Delta Networks", arXiv:2412.06464,
section 3.3, the chunkwise form), with q, k l2-normalised, gc the within-chunk cumulative log decay, beta in fp32:
    Akk = strict_tril(beta_i exp(gc_i - gc_j) k_i . k_j)        Ai = (I + Akk)^-1       (rounding point "Ai")
    u = Ai (beta * v)  ("bv": beta*v rounded, "u")              w = Ai (beta exp(gc) * k)  ("bk", "w")
    v_new = u - w h    ("h": the chunk's start state as read, "v_new")
    o = scale (exp(gc) * (q h) + tril(q k^T exp(gc_i - gc_j)) v_new)   ("Aqk": the masked q k^T before its dot, "o")
    h <- exp(gc_last) h + (k exp(gc_last - gc))^T v_new           (the carried state stays fp32/f64)
Rounding points ("qk": the normalised q and k) are those of a kernel that keeps its inputs' dtype for every
stored intermediate (FLA 0.5.2 with bf16 inputs: A, w, u, h, v_new allocated in k.dtype; `(v * beta).to(v.dtype)`;
the masked q k^T cast to v's dtype before its dot). With `--points none` the model must reproduce the fixture to
f64 rounding: that checks the formulas. Prints, per fixture, the model's error of `o` and the final state against
the fixture, as the bf16 tier measures it (RMS over max(1, RMS(ref)), worst element over max(1, max|ref|)).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..", "..", "python")))

from replayssm_kit.fixture import load_fixture  # noqa: E402

POINTS = ("qk", "bv", "bk", "Ai", "u", "w", "h", "v_new", "Aqk", "o")


def bf16(x: np.ndarray) -> np.ndarray:
    """Round to the nearest bf16 (ties to even), returned as float64."""
    f = np.asarray(x, dtype=np.float32)
    b = f.view(np.uint32).astype(np.uint64)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return b.astype(np.uint32).view(np.float32).astype(np.float64)


def chunk_forward(fx, points: set):
    m, x, p = fx.model, fx.inputs, fx.params
    if m["op"] != "gdn":
        raise SystemExit(f"{fx.path}: the model covers GDN only")
    H, HV, K, V = m["H"], m["HV"], m["K"], m["V"]
    G, C = HV // H, fx.args["chunk"]
    r = (lambda name, a: bf16(a) if name in points else a)
    q, k, v = (np.asarray(x[n], np.float64) for n in ("q", "k", "v"))
    a, b = np.asarray(x["a"], np.float64).reshape(-1, HV), np.asarray(x["b"], np.float64).reshape(-1, HV)
    T = q.shape[0]
    eps = 1e-6
    q = r("qk", q / np.sqrt((q * q).sum(-1, keepdims=True) + eps))
    k = r("qk", k / np.sqrt((k * k).sum(-1, keepdims=True) + eps))
    A_log = np.asarray(p["A_log"], np.float64).reshape(HV)
    dt = np.asarray(p["dt_bias"], np.float64).reshape(HV)
    xg = a + dt
    g = -np.exp(A_log) * np.where(xg > 20, xg, np.log1p(np.exp(np.minimum(xg, 20))))
    beta = 1 / (1 + np.exp(-b))
    S0 = np.asarray(x["state"], np.float64).reshape(HV, *((V, K) if m["layout"] == "vk" else (K, V)))
    S = S0.transpose(0, 2, 1).copy() if m["layout"] == "vk" else S0.copy()  # [HV, K, V]
    scale = m.get("q_scale") or K ** -0.5
    o = np.zeros((T, HV, V))
    for hv in range(HV):
        h = S[hv]
        for c0 in range(0, T, C):
            sl = slice(c0, min(T, c0 + C))
            qc, kc, vc = q[sl, hv // G], k[sl, hv // G], v[sl, hv]
            gc, bc = np.cumsum(g[sl, hv]), beta[sl, hv]
            n = len(gc)
            D = np.exp(gc[:, None] - gc[None, :])
            Akk = np.tril(bc[:, None] * D * (kc @ kc.T), -1)
            Ai = r("Ai", np.linalg.solve(np.eye(n) + Akk, np.eye(n)))
            u = r("u", Ai @ r("bv", bc[:, None] * vc))
            w = r("w", Ai @ r("bk", (bc * np.exp(gc))[:, None] * kc))
            hr = r("h", h)
            v_new = r("v_new", u - w @ hr)
            Aqk = r("Aqk", np.tril((qc @ kc.T) * D))
            o[sl, hv] = scale * (np.exp(gc)[:, None] * (qc @ hr) + Aqk @ v_new)
            h = np.exp(gc[-1]) * h + (kc * np.exp(gc[-1] - gc)[:, None]).T @ v_new
        S[hv] = h
    state = S.transpose(0, 2, 1) if m["layout"] == "vk" else S
    return r("o", o), state


def tier_view(got, ref):
    d = got - np.asarray(ref, np.float64)
    rms = np.sqrt(np.mean(d * d)) / max(1.0, float(np.sqrt(np.mean(np.square(ref)))))
    i = int(np.argmax(np.abs(d)))
    return rms, float(np.abs(d).flat[i]) / max(1.0, float(np.abs(ref).max())), np.unravel_index(i, d.shape)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fixtures", nargs="+")
    ap.add_argument("--points", default="all", help="rounding points: all, none, or a comma list of " + ", ".join(POINTS))
    args = ap.parse_args(argv)
    pts = set(POINTS) if args.points == "all" else set() if args.points == "none" else set(args.points.split(","))
    if pts - set(POINTS):
        ap.error(f"--points: unknown {sorted(pts - set(POINTS))}")
    u = 2.0 ** -9
    for path in args.fixtures:
        fx = load_fixture(path)
        o, st = chunk_forward(fx, pts)
        ro, wo, io = tier_view(o, fx.expected["o"])
        rs, ws, _ = tier_view(st, fx.expected["state"])
        print(f"{os.path.basename(path)}: o rel_rms {ro:.3g} ({ro / u:.2f} u) worst {wo:.3g} ({wo / u:.2f} u) at "
              f"{tuple(int(i) for i in io)}; state rel_rms {rs:.3g} ({rs / u:.2f} u) worst {ws:.3g} ({ws / u:.2f} u)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
