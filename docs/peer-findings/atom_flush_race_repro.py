"""Standalone repro: ATOM's ReplaySSM GDN flush reads records that another program of the same launch overwrites
(ROCm/ATOM @ 2748d9e92d23f64b0831b6dfa57e4388576b4b7f, atom/model_ops/fla_ops/replayssm.py). Needs torch, triton,
numpy and that one file (its `from .op import exp` is served here by a jit function returning tl.exp(x), which is
all op.py's `exp = tl.exp` is):

    TRITON_INTERPRET=1 python3 atom_flush_race_repro.py PATH/TO/replayssm.py            # CPU interpreter
    TRITON_INTERPRET=1 python3 atom_flush_race_repro.py PATH/TO/replayssm.py --reverse  # grid walked backwards
    python3 atom_flush_race_repro.py PATH/TO/replayssm.py --rows 4096                   # a GPU, many rows

One GDN head (K = 16, V = 128, so the serial route splits V over NV = 2 programs of BV = 64), cache_len 16,
max_query_len 4, fp32 records. Four verify windows of 4 tokens, all accepted (`replayssm_commit` after each);
the fourth forward sees h = 12 committed records, 12 + 2 * 4 > 16, and flushes: every program rebuilds S_h for
its V columns from the checkpoint and records 0..11, stores it, then appends this step's records from position
0. Program i_v == 0 alone stores the k and g records, so when it runs before program i_v == 1 of the same row
and head, the latter folds the new k/g in place of records 0..3. The flushed checkpoint is compared with a
float64 recurrence, per half of V; exit status 1 when a half misses (any row), 0 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import types

# IEEE fp32 dots on a GPU too (Triton's default there is TF32), so that rounding stays far below the threshold
os.environ.setdefault("TRITON_F32_DEFAULT", "ieee")

import numpy as np
import torch
import triton
import triton.language as tl


@triton.jit
def exp(x):
    return tl.exp(x)


def load(path: str):
    pkg = types.ModuleType("atom_fla")
    pkg.__path__ = []
    op = types.ModuleType("atom_fla.op")
    op.exp = exp
    sys.modules["atom_fla"], sys.modules["atom_fla.op"] = pkg, op
    spec = importlib.util.spec_from_file_location("atom_fla.replayssm", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def reverse_interpreter_grid():
    """Under TRITON_INTERPRET=1: programs run from the last grid index to the first."""
    from triton.runtime import interpreter as itp

    b = itp.interpreter_builder
    dims, set_dim, set_idx = [1, 1, 1], b.set_grid_dim, b.set_grid_idx

    def grid_dim(x, y, z):
        dims[:] = [x, y, z]
        set_dim(x, y, z)

    b.set_grid_dim = grid_dim
    b.set_grid_idx = lambda x, y, z: set_idx(dims[0] - 1 - x, dims[1] - 1 - y, dims[2] - 1 - z)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("replayssm_py")
    ap.add_argument("--rows", type=int, default=1, help="sequences (slots) in the batch")
    ap.add_argument("--reverse", action="store_true", help="interpreter only: walk the grid backwards")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rs = load(args.replayssm_py)
    if args.reverse:
        reverse_interpreter_grid()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    rng = np.random.default_rng(args.seed)
    N, K, V, T, CAP, steps = args.rows, 16, 128, 4, 16, 4
    ckpt = torch.zeros(N, 1, K, V, dtype=torch.float32, device=dev)
    buf_k = torch.zeros(N, 1, CAP, K, dtype=torch.float32, device=dev)
    buf_u = torch.zeros(N, 1, CAP, V, dtype=torch.float32, device=dev)
    buf_g = torch.zeros(N, 1, CAP, dtype=torch.float32, device=dev)
    write_pos = torch.zeros(N, dtype=torch.int32, device=dev)
    slots = torch.arange(N, dtype=torch.int32, device=dev)
    cu = torch.arange(0, N * T + 1, T, dtype=torch.int32, device=dev)
    S = np.zeros((N, K, V))  # float64 truth of the committed state
    for step in range(steps):
        q = rng.standard_normal((N * T, K)).astype(np.float32)
        k = rng.standard_normal((N * T, K)).astype(np.float32)
        v = rng.standard_normal((N * T, V)).astype(np.float32)
        g = rng.uniform(-0.3, -0.01, N * T).astype(np.float32)
        beta = rng.uniform(0.2, 0.9, N * T).astype(np.float32)
        if step == steps - 1:
            flushed = S.copy()  # what the flush of this step must fold: the 12 committed tokens
        t = lambda x, *s: torch.from_numpy(x).to(dev).reshape(1, N * T, *s)
        rs.replayssm_gated_delta_rule(t(q, 1, K), t(k, 1, K), t(v, 1, V), t(g, 1), t(beta, 1), ckpt, buf_k, buf_u,
                                      buf_g, write_pos, slots, cu, T, use_qk_l2norm_in_kernel=True, route="serial")
        rs.replayssm_commit(write_pos, slots, torch.full((N,), T, dtype=torch.int32, device=dev), T, CAP)
        kn = k.astype(np.float64) / np.sqrt((k.astype(np.float64) ** 2).sum(-1, keepdims=True) + 1e-6)
        for n in range(N):
            for i in range(n * T, n * T + T):
                S[n] *= np.exp(np.float64(g[i]))
                u = beta[i] * (v[i] - S[n].T @ kn[i])
                S[n] += np.outer(kn[i], u)
    got = ckpt[:, 0].double().cpu().numpy()
    err = np.abs(got - flushed)
    scale = max(1.0, float(np.abs(flushed).max()))
    bad = 0
    for lo, hi in ((0, 64), (64, 128)):
        e = err[:, :, lo:hi]
        n, kk, vv = np.unravel_index(int(e.argmax()), e.shape)
        rows_bad = int((e.reshape(N, -1).max(1) > 2e-3 * scale).sum())
        bad += rows_bad
        print(f"V columns {lo}..{hi - 1} (program i_v = {lo // 64}): worst |err| {e.max():.3g} at row {n} "
              f"[k {kk}, v {lo + vv}] (truth {flushed[n, kk, lo + vv]:.6g}, got {got[n, kk, lo + vv]:.6g}); "
              f"rows off by > 2e-3 x scale: {rows_bad} of {N}")
    print(f"device {dev}, rows {N}, write_pos after the flush step {write_pos[:4].tolist()}, scale {scale:.3g}, "
          f"{'REPRODUCED' if bad else 'not reproduced'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
