"""The Python kit checking real PyTorch kernels on a GPU: transformers' Qwen3.5 GDN torch functions
(torch_recurrent_gated_delta_rule, torch_chunk_gated_delta_rule) and Kimi Linear's KDA functions, running on
CUDA, against the project's committed recurrent and chunked fixtures (golden presets, the public matrix and the
peer set). Prints one line per fixture and a summary; exits 1 if any fixture fails. A negative control (the
same adapter without the q/k l2norm) must fail, to show the check has teeth.

Usage: bash tools/peer/gpu_demo.sh [--device cpu] [--limit N]
Needs torch, transformers, numpy and safetensors; no network (HF_HUB_OFFLINE=1), no build of the project.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import replayssm_kit as rk
from transformers.models.kimi_linear import modeling_kimi_linear as mk
from transformers.models.qwen3_5 import modeling_qwen3_5 as mq

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GDN_REC = getattr(mq.torch_recurrent_gated_delta_rule, "__wrapped__", mq.torch_recurrent_gated_delta_rule)
GDN_CHUNK = getattr(mq.torch_chunk_gated_delta_rule, "__wrapped__", mq.torch_chunk_gated_delta_rule)
KDA_REC = getattr(mk.recurrent_kimi_delta_attention, "__wrapped__", mk.recurrent_kimi_delta_attention)
KDA_CHUNK = getattr(mk.chunk_kimi_delta_attention, "__wrapped__", mk.chunk_kimi_delta_attention)


def adapter(device, l2norm=True):
    """fixture -> {"out.o", "out.state"} computed by the transformers torch functions on `device`."""

    def run(fx):
        m, i, p = fx.model, fx.inputs, fx.params
        act = torch.bfloat16 if m.get("act_dtype", "BF16") == "BF16" else torch.float32
        t = lambda x, dt=torch.float32: torch.from_numpy(np.ascontiguousarray(x)).to(device=device, dtype=dt)
        q, k, v = t(i["q"], act)[None], t(i["k"], act)[None], t(i["v"], act)[None]
        a, b = t(i["a"], act)[None], t(i["b"], act)[None]
        A_log, dt_bias = t(p["A_log"]), t(p["dt_bias"])
        kv_layout = m.get("layout", "vk") == "kv"
        state = t(i["state"])[None]
        if not kv_layout:
            state = state.transpose(-1, -2).contiguous()  # the functions keep [B, HV, K, V]
        H, HV = m["H"], m["HV"]
        beta = b.sigmoid() if m.get("round_beta_to_act") else b.float().sigmoid()
        x = a.float() + (dt_bias.reshape(HV, -1) if m["op"] == "kda" else dt_bias)
        if m["op"] == "kda" and m.get("kda_gate") == "lower_bound_sigmoid":
            g = m.get("lower_bound", -5.0) * torch.sigmoid(A_log.exp()[:, None] * x)
        else:
            g = -(A_log.exp()[:, None] if m["op"] == "kda" else A_log.exp()) * F.softplus(x)
        if HV > H:
            q, k = q.repeat_interleave(HV // H, dim=2), k.repeat_interleave(HV // H, dim=2)
        chunk = fx.args.get("chunk")
        with torch.no_grad():
            if m["op"] == "gdn":
                fn = GDN_CHUNK if fx.op == "chunked" else GDN_REC
                kw = {"chunk_size": chunk} if fx.op == "chunked" else {}
                o, s = fn(q, k, v, g=g, beta=beta, initial_state=state, output_final_state=True,
                          use_qk_l2norm_in_kernel=l2norm, **kw)
            else:
                if fx.op == "chunked":
                    o, s = KDA_CHUNK(q, k, v, g=g, beta=beta, chunk_size=chunk, initial_state=state,
                                     output_final_state=True, use_qk_l2norm_in_kernel=l2norm)
                else:
                    o, s = KDA_REC(q, k, v, g=g, beta=beta, initial_state=state, output_final_state=True,
                                   use_qk_l2norm_in_kernel=l2norm)
        s = s[0] if kv_layout else s[0].transpose(-1, -2)
        if m.get("state_dtype") == "BF16":
            s = s.to(torch.bfloat16)
        return {"out.o": o[0].float(), "out.state": s}

    return run


def selected(limit):
    paths = []
    for sub in ("peer", "matrix", "golden"):
        for path in rk.find_fixtures(os.path.join(REPO, "fixtures", sub), ops={"recurrent", "chunked"}):
            paths.append(path)
    return paths[:limit] if limit else paths


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--limit", type=int, default=0)
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("no CUDA device (use --device cpu to try the demo without one)")
    import transformers

    dev_name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}, device {dev_name}")
    start = time.time()
    run = adapter(args.device)
    passed, failed, worst = 0, 0, []
    for path in selected(args.limit):
        fx = rk.load_fixture(path)
        r = fx.check(run)
        name = os.path.relpath(path, os.path.join(REPO, "fixtures"))
        metrics = " ".join(f"{t.name}: max_abs={t.report.max_abs:.3g} rel_rms={t.report.rel_rms:.3g} "
                           f"excess={t.report.worst_excess:.3f}" for t in r.tensors)
        print(f"{'ok  ' if r.ok else 'FAIL'} {name}  {metrics}")
        if not r.ok:
            print(r.summary())
        passed += r.ok
        failed += not r.ok
        worst.extend((t.report.worst_excess, name, t.name) for t in r.tensors)
    # Negative control: no l2norm must be caught.
    control = os.path.join(REPO, "fixtures", "peer", "transformers", "hf-qwen3_5__recurrent__H2_HV6_K32_V48_T20.safetensors")
    caught = not rk.load_fixture(control).check(adapter(args.device, l2norm=False)).ok
    worst.sort(reverse=True)
    print(f"summary: {passed} passed, {failed} failed in {time.time() - start:.1f} s on {dev_name}; "
          f"largest error / tolerance = {worst[0][0]:.3f} ({worst[0][1]} {worst[0][2]}); "
          f"negative control (no l2norm) {'caught' if caught else 'NOT caught'}")
    sys.exit(0 if failed == 0 and caught else 1)


if __name__ == "__main__":
    main()
