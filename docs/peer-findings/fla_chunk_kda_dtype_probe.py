"""Standalone probe: FLA's `chunk_kda` forward with float32 versus bfloat16 q, k, v on a GPU (flash-linear-
attention, fla-core 0.5.2, fla/ops/kda/chunk.py). Needs torch, triton and FLA's `fla/` package (plus einops) on
the path given by --peer-src; nothing of this project:

    CUDA_LAUNCH_BLOCKING=1 python3 fla_chunk_kda_dtype_probe.py --peer-src DIR              # the whole matrix
    CUDA_LAUNCH_BLOCKING=1 python3 fla_chunk_kda_dtype_probe.py --peer-src DIR --case 60:f32:64:gate

A case is K:dtype:chunk_size:gate[:H<n>] (dtype f32 or bf16; gate `gate` or `nogate`; H defaults to 1). Each
case runs in its own process (a CUDA fault poisons the context of the process that hit it): B = 1, T = 75,
HV = 2, K = V, a random fp32 initial state, one `chunk_kda` call with the arguments a serving
engine passes (in-kernel l2norm, beta sigmoid and, for `gate`, the gate -exp(A_log) * softplus(a + dt_bias);
`nogate` passes a precomputed log-decay instead). A case prints `ok` with the largest error of the output and
of the final state against a float64 recurrence written from the KDA formulas (S <- diag(exp g) S; S += beta k
(v - S^T k)^T; o = S^T q * scale, over K x V per head), or `error` with the exception and the innermost FLA
frame. Exit status 0 whatever the verdicts: it reports, it does not judge.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor

# float32 at every K of the fixtures and of FLA's own KDA tests, bfloat16 at the two K that failed in float32,
# and float32 with a precomputed gate / another chunk size to see whether the gate path or the chunk decides
MATRIX = ([f"{K}:f32:64:gate" for K in (8, 32, 60, 64, 100, 128)] + ["60:bf16:64:gate", "100:bf16:64:gate"]
          + ["60:f32:64:nogate", "100:f32:32:gate"])


def reference(q, k, v, g, beta, h0, scale):
    """float64 KDA recurrence, one head at a time; q, k [T, HV, K] already l2-normalised, g [T, HV, K]
    log-decay, beta [T, HV], h0 [HV, K, V]; returns o [T, HV, V] and the final state."""
    import torch

    S = h0.double().clone()
    T = q.shape[0]
    o = torch.empty(T, q.shape[1], v.shape[2], dtype=torch.float64)
    for t in range(T):
        S = S * torch.exp(g[t].double())[:, :, None]
        kt, vt = k[t].double(), v[t].double()
        pred = torch.einsum("hk,hkv->hv", kt, S)
        S = S + beta[t].double()[:, None, None] * kt[:, :, None] * (vt - pred)[:, None, :]
        o[t] = torch.einsum("hk,hkv->hv", q[t].double(), S) * scale
    return o, S


def run_case(spec: str) -> int:
    import torch
    import torch.nn.functional as F

    K, dt, C, gate, *heads = spec.split(":")
    K, C = int(K), int(C)
    H = int(heads[0][1:]) if heads else 1  # optional fifth field "H<n>": n query/key heads (HV = 2 always)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dt]
    from fla.ops.kda import chunk_kda

    torch.manual_seed(1234 + K)
    T, HV, V = 75, 2, K
    dev = "cuda"
    q = torch.randn(1, T, H, K).to(dtype)
    k = torch.randn(1, T, H, K).to(dtype)
    v = torch.randn(1, T, HV, V).to(dtype)
    a = torch.randn(1, T, HV, K)
    b = torch.randn(1, T, HV)
    A_log = torch.rand(HV) * 0.5
    dt_bias = torch.randn(HV * K) * 0.1
    h0 = torch.randn(1, HV, K, V) * 0.1
    scale = K ** -0.5
    # what the kernel is meant to compute, from the values it actually receives (rounded inputs)
    qf = F.normalize(q.float()[0].repeat_interleave(HV // H, dim=1).double(), dim=-1)
    kf = F.normalize(k.float()[0].repeat_interleave(HV // H, dim=1).double(), dim=-1)
    gl = -torch.exp(A_log.double())[None, :, None] * F.softplus(a[0].double() + dt_bias.double().view(HV, K))
    beta = torch.sigmoid(b[0].double())
    ref_o, ref_S = reference(qf, kf, v.float()[0], gl, beta, h0[0], scale)
    kw = dict(scale=scale, initial_state=h0.to(dev), output_final_state=True, use_qk_l2norm_in_kernel=True,
              use_beta_sigmoid_in_kernel=True, chunk_size=C)
    try:
        if gate == "gate":
            o, ht = chunk_kda(q.to(dev), k.to(dev), v.to(dev), a.to(dev), b.to(dev), use_gate_in_kernel=True,
                              A_log=A_log.to(dev), dt_bias=dt_bias.to(dev), **kw)
        else:
            o, ht = chunk_kda(q.to(dev), k.to(dev), v.to(dev), gl[None].float().to(dev), b.to(dev), **kw)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001  (the probe reports any failure of the peer call)
        # the innermost call sites inside fla/ops (the autotune cache wrapper of fla/ops/utils/cache.py aside)
        frames = [f for f in traceback.extract_tb(e.__traceback__)
                  if "/fla/ops/" in f.filename and not f.filename.endswith("utils/cache.py")]
        where = " <- ".join(f"{f.filename.split('/fla/ops/')[-1]}:{f.lineno} {f.name}" for f in frames[::-1][:3]) or "?"
        msg = str(e).strip().splitlines()
        print(f"{spec} error {type(e).__name__}: {msg[0] if msg else ''} | {msg[-1] if msg else ''} | at fla/ops/{where}")
        return 0
    eo = (o[0].double().cpu() - ref_o).abs()
    es = (ht[0].double().cpu() - ref_S).abs()
    io, is_ = int(eo.argmax()), int(es.argmax())
    print(f"{spec} ok out max|err| {eo.max():.3e} at flat {io} (ref {ref_o.flatten()[io]:.6f}, max|ref| "
          f"{ref_o.abs().max():.3f}); state max|err| {es.max():.3e} at flat {is_} (max|ref| {ref_S.abs().max():.3f})")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--peer-src", required=True, help="folder holding FLA's fla/ package (and einops)")
    p.add_argument("--case", help="K:f32|bf16:chunk:gate|nogate[:H2]; default: the whole matrix, one process each")
    p.add_argument("--cases", help="comma-separated cases to run instead of the default matrix")
    p.add_argument("--jobs", type=int, default=len(MATRIX))
    p.add_argument("--timeout", type=int, default=400)
    args = p.parse_args()
    sys.path.insert(0, os.path.abspath(args.peer_src))
    if args.case:
        return run_case(args.case)

    def one(spec: str) -> str:
        cmd = [sys.executable, os.path.abspath(__file__), "--peer-src", args.peer_src, "--case", spec]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            return f"{spec} timeout after {args.timeout} s"
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith(spec)]
        if lines:
            return lines[-1]
        tail = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
        return f"{spec} crashed rc={r.returncode}: {tail}"

    cases = args.cases.split(",") if args.cases else MATRIX
    with ThreadPoolExecutor(args.jobs) as ex:
        for line in ex.map(one, cases):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
