"""Measures the places where a public implementation and the reference disagree, or could: prints a report
used by docs/peer-conformance.md. Nothing here writes fixtures.

  1. transformers 5.x video positions (Qwen2-VL, Qwen2.5-VL) against the reference (through the CLI);
  2. l2norm forms: x * rsqrt(s + eps), x / sqrt(s + eps), F.normalize, in binary32, for ordinary and tiny norms;
  3. bf16 beta rounding: a bf16 transformers fixture checked with round_beta_to_act switched off;
  4. the Kimi forget gate's log(1 + exp(x)) against log1p(exp(x)).

Run: HF_HUB_OFFLINE=1 python tools/peer/known_differences.py [path/to/replayssm]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

import peer_common as pc
import gen_transformers_mrope as gm

CLI = sys.argv[1] if len(sys.argv) > 1 else os.path.join(pc.REPO, "build-cpu", "tools", "replayssm")


def reference_positions(preset, segments, generated):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"segments": segments, "generated": generated}, f)
        path = f.name
    try:
        out = subprocess.run([CLI, "mrope", "positions", "--model", preset, "--request", path], check=True,
                             capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    rep = json.loads(out)
    return np.array(rep["positions"]), rep["delta"]


def video_positions():
    print("== 1. video positions: transformers", pc.versions()["transformers"], "vs the reference")
    cases = [
        ("qwen2-vl", "4 temporal groups, merged grid 2x2 (T > max(h, w))",
         [{"type": "text", "length": 2}, {"type": "video", "grid": [4, 4, 4]}, {"type": "text", "length": 3}]),
        ("qwen2.5-vl", "4 temporal groups at 0.5 s per grid (4 fps), merged 2x2",
         [{"type": "text", "length": 2}, {"type": "video", "grid": [4, 4, 4], "second_per_grid": 0.5},
          {"type": "text", "length": 3}]),
        ("qwen2.5-vl", "3 temporal groups at 2 s per grid (1 fps), merged 2x2",
         [{"type": "text", "length": 2}, {"type": "video", "grid": [3, 4, 4], "second_per_grid": 2.0},
          {"type": "text", "length": 3}]),
        ("qwen2.5-vl", "2 temporal groups at 1 s per grid, merged 4x4 (control: both rules agree)",
         [{"type": "text", "length": 2}, {"type": "video", "grid": [2, 8, 8], "second_per_grid": 1.0},
          {"type": "text", "length": 3}]),
    ]
    for preset, what, segs in cases:
        cfg = gm.build_config(preset)
        hf, hf_delta, n = gm.positions(preset, cfg, segs)
        hf = hf.numpy()
        ref, ref_delta = reference_positions(preset, segs, gm.GENERATED)
        diff = np.nonzero((hf != ref).any(axis=0))[0]
        print(f"-- {preset}: {what}")
        print(f"   t row  transformers {hf[0].tolist()}")
        print(f"   t row  reference    {ref[0].tolist()}")
        print(f"   delta  transformers {hf_delta}  reference {ref_delta};  tokens that differ: {len(diff)} of {n + gm.GENERATED}"
              + (f" (first at index {diff[0]})" if len(diff) else ""))


def l2norm_forms():
    print("== 2. l2norm forms in binary32 against binary64 x / sqrt(sum x^2 + 1e-6)")
    g = pc.torch_generator(7)
    for scale, what in [(1.0, "standard normal, K = 128"), (1e-4, "tiny: standard normal * 1e-4, K = 128")]:
        x = torch.randn(20000, 128, generator=g) * scale
        x64 = x.double()
        truth = x64 / torch.sqrt((x64 * x64).sum(-1, keepdim=True) + 1e-6)
        forms = {
            "x * rsqrt(s + eps)   (HF qwen3_5 l2norm)": x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6),
            "x / sqrt(s + eps)    (HF kimi_linear l2norm, FLA kernels)": x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6),
            "F.normalize(x)       (FLA test references)": F.normalize(x, p=2, dim=-1),
        }
        print(f"-- {what}: ||x|| ~ {float(x.norm(dim=-1).mean()):.3g}")
        for name, y in forms.items():
            err = (y.double() - truth).abs().max().item()
            nrm = y.double().norm(dim=-1).mean().item()
            print(f"   {name}: max |err| = {err:.3g}, mean norm {nrm:.6g}")


def beta_rounding():
    print("== 3. bf16 beta rounding: the bf16 transformers fixtures checked with round_beta_to_act off")
    src_dir = os.path.join(pc.OUT_DIR, "transformers")
    for name in sorted(os.listdir(src_dir)):
        if "bf16" not in name:
            continue
        t, d, m = pc.rk.read_safetensors(os.path.join(src_dir, name))
        cfg = json.loads(m["config"])
        cfg["model"]["round_beta_to_act"] = False
        m = dict(m, config=json.dumps(cfg))
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, name)
            pc.rk.write_safetensors(path, {k: (v if d[k] != "BF16" else pc.rk.f32_to_bf16_bits(v), d[k])
                                           for k, v in t.items()}, m)
            out = subprocess.run([CLI, "check", path], capture_output=True, text=True).stdout
        print(f"-- {name} with round_beta_to_act = false:")
        for line in out.splitlines()[1:3]:
            print("   " + line.strip())


def kimi_softplus():
    print("== 4. Kimi forget gate: log(1 + exp(x)) in binary32 against softplus in binary64")
    x = torch.linspace(-30, 25, 200001)
    kimi = torch.where(x > 20.0, x, torch.log(1.0 + torch.exp(x)))
    truth = torch.nn.functional.softplus(x.double())
    rel = ((kimi.double() - truth).abs() / truth).numpy()
    for lo, hi in [(-30, -15), (-15, -5), (-5, 0), (0, 25)]:
        sel = (x.numpy() >= lo) & (x.numpy() < hi)
        print(f"   x in [{lo}, {hi}): max relative error {rel[sel].max():.3g}, max abs error "
              f"{(kimi.double() - truth).abs().numpy()[sel].max():.3g}")
    print("   (g = -exp(A_log) * softplus: the absolute error of g is exp(A_log) times the abs error above)")


if __name__ == "__main__":
    torch.set_num_threads(2)
    video_positions()
    l2norm_forms()
    beta_rounding()
    kimi_softplus()
