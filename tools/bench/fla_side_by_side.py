#!/usr/bin/env python3
"""This project's ReplaySSM step (separate verify + commit, and the fused step: the previous step's commit
folded into this step's verify) next to FLA's full-state spec path, on the same GPU in the same call.

FLA (flash-linear-attention / fla-core) is imported from a path or package the user provides; nothing of it is
copied here. FLA's full-state spec path is what a vLLM user runs for MTP today: `fused_recurrent_kda_fwd` with
per-token state slots (`ssm_state_indices` [N, T]) and `num_accepted_tokens` (the initial state is read from
the slot of token num_accepted - 1, every token's state is written to its own slot), GDN through the KDA kernel
with the per-head gate broadcast over K. Decode (T = 1, in place) is timed too.

Presets (--preset): qwen3.5 (GDN: H 16, HV 32, K = V = 128; the per-head gate g is precomputed and broadcast
over K, beta precomputed, as a vLLM GDN layer passes them) and kimi-linear (KDA: H = HV = 32, K = V = 128; real
per-K gates computed in the kernel from the raw gate input with A_log [HV] and dt_bias [HV, K]
(`use_gate_in_kernel`, g = -exp(A_log) softplus(a + dt_bias)) and beta = sigmoid(b) in the kernel
(`use_beta_sigmoid_in_kernel`): the same per-token work the project's KDA kernels do). Both: fp32 state in the
[V, K] layout (state_v_first), bf16 activations, one layer. L2 policy as in `replayssm bench kernels`: every timed round uses a different
copy of the inputs and of the state pool (copies rotate until they exceed the 60 MB L2 several times over).
Times are medians of CUDA-event timings of the kernel alone (the GPU is kept busy while Python enqueues it, so
the wrapper's host overhead is not counted). The project's numbers come from `replayssm bench kernels --csv` run
by this script in the same call (the all-layer times divided by the layer count the bench prints for the
preset: 24 for qwen3.5, 20 for kimi-linear).

Usage: fla_side_by_side.py --cli PATH/TO/replayssm [--fla-path DIR] [--preset qwen3.5|kimi-linear]
                           [--batches 32,64,128,256] [--T 2,4,8] [--repeats 9] [--csv OUT.csv]
Exits non-zero, naming what is missing (FLA, an FLA option the preset needs, a CUDA device, a row of the
project's bench), when it cannot measure; it never invents a number.
"""
import argparse
import csv
import inspect
import os
import re
import statistics
import subprocess
import sys
import tempfile

L2_BYTES = 60 << 20

# Shapes per preset (the project's presets of the same name; core/src/config.cpp). kda: real per-K gates and
# beta computed in FLA's kernel (see above).
PRESETS = {
    "qwen3.5": {"H": 16, "HV": 32, "K": 128, "V": 128, "kda": False},
    "kimi-linear": {"H": 32, "HV": 32, "K": 128, "V": 128, "kda": True},
}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", required=True, help="the replayssm CLI of a CUDA build")
    ap.add_argument("--fla-path", help="directory holding the fla package (else it must be importable)")
    ap.add_argument("--preset", default="qwen3.5", choices=sorted(PRESETS))
    ap.add_argument("--batches", default="32,64,128,256")
    ap.add_argument("--T", default="2,4,8")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--csv", help="write the table as CSV")
    return ap.parse_args()


def import_fla(path):
    if path:
        sys.path.insert(0, path)
    try:
        import torch  # noqa: F401
        from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd
    except Exception as e:  # noqa: BLE001 - any import failure means: no FLA here
        sys.exit(f"FLA is not importable ({type(e).__name__}: {e}); pass --fla-path DIR or install fla-core")
    return fused_recurrent_kda_fwd


def check_kernel_options(kernel, preset):
    """Exits naming the keyword arguments of fused_recurrent_kda_fwd the preset needs that this FLA lacks."""
    need = ["ssm_state_indices", "num_accepted_tokens", "state_v_first", "inplace_final_state"]
    if PRESETS[preset]["kda"]:
        need += ["A_log", "dt_bias", "use_gate_in_kernel", "use_beta_sigmoid_in_kernel"]
    have = inspect.signature(kernel).parameters
    missing = [n for n in need if n not in have]
    if missing:
        sys.exit(f"this FLA's fused_recurrent_kda_fwd lacks {', '.join(missing)} (needed by --preset {preset}); "
                 "nothing measured")


def time_rounds(fn, copies, repeats):
    import torch
    times = []
    for r in range(repeats + 1):
        args = copies[r % len(copies)]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        # Keep the GPU busy while Python enqueues the launch, so the events time the kernel, not the
        # wrapper's host-side overhead (the project's C++ launches do not carry one).
        torch.cuda._sleep(2_000_000)
        start.record()
        fn(*args)
        end.record()
        torch.cuda.synchronize()
        if r:  # the first round compiles
            times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)


def fla_times(kernel, batch, T, repeats, H, HV, K, V, kda):
    """(spec us, decode us) for one layer: full-state spec with per-token slots, and decode in place."""
    import torch
    dev = "cuda"
    N = batch
    state_bytes = N * (1 + T) * HV * K * V * 4
    ncopies = max(2, -(-3 * L2_BYTES // max(state_bytes, 1)))

    def make(Tn, slots_per_row):
        q = torch.randn(1, N * Tn, H, K, device=dev, dtype=torch.bfloat16)
        k = torch.nn.functional.normalize(torch.randn(1, N * Tn, H, K, device=dev), dim=-1).to(torch.bfloat16)
        v = torch.randn(1, N * Tn, HV, V, device=dev, dtype=torch.bfloat16)
        if kda:  # raw gate input and raw b: FLA computes the per-K gate and sigmoid(b) in the kernel
            g = torch.randn(1, N * Tn, HV, K, device=dev, dtype=torch.bfloat16)
            beta = torch.randn(1, N * Tn, HV, device=dev, dtype=torch.bfloat16)
        else:
            g = (-torch.rand(1, N * Tn, HV, 1, device=dev)).expand(1, N * Tn, HV, K).contiguous()
            beta = torch.rand(1, N * Tn, HV, device=dev, dtype=torch.bfloat16)
        pool = torch.randn(N * slots_per_row, HV, V, K, device=dev, dtype=torch.float32) * 0.1
        cu = torch.arange(0, N * Tn + 1, Tn, device=dev, dtype=torch.int64)
        idx = torch.arange(N * slots_per_row, device=dev, dtype=torch.int32).view(N, slots_per_row)
        return q, k, v, g, beta, pool, cu, idx

    spec_copies = [make(T, T) for _ in range(ncopies)]
    acc = torch.full((N,), T, device=dev, dtype=torch.int32)
    gate = {}
    if kda:
        gate = {"A_log": torch.rand(HV, device=dev, dtype=torch.float32) * 0.5,
                "dt_bias": torch.randn(HV * K, device=dev, dtype=torch.float32) * 0.1,
                "use_gate_in_kernel": True, "use_beta_sigmoid_in_kernel": True}

    def spec(q, k, v, g, beta, pool, cu, idx):
        kernel(q=q, k=k, v=v, g=g, beta=beta, initial_state=pool, inplace_final_state=True, state_v_first=True,
               cu_seqlens=cu, ssm_state_indices=idx, num_accepted_tokens=acc, use_qk_l2norm_in_kernel=True, **gate)

    t_spec = time_rounds(spec, spec_copies, repeats)
    del spec_copies
    dec_copies = [make(1, 1) for _ in range(ncopies)]

    def decode(q, k, v, g, beta, pool, cu, idx):
        kernel(q=q, k=k, v=v, g=g, beta=beta, initial_state=pool, inplace_final_state=True, state_v_first=True,
               cu_seqlens=cu, ssm_state_indices=idx[:, 0], use_qk_l2norm_in_kernel=True, **gate)

    t_dec = time_rounds(decode, dec_copies, repeats)
    return t_spec, t_dec


def project_times(cli, preset, batches, Ts, repeats):
    """({(batch, T): csv row}, layers) from `replayssm bench kernels`; layers is the count its banner prints."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.csv")
        out = subprocess.run([cli, "bench", "kernels", "--preset", preset, "--batches", batches, "--T", Ts,
                              "--repeats", str(repeats), "--csv", path], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"`{cli} bench kernels` failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
        m = re.search(r"# preset (\S+): (\d+) layers", out.stdout + out.stderr)
        if not m or m.group(1) != preset:
            sys.exit(f"`{cli} bench kernels` printed no '# preset {preset}: N layers' banner: layer count unknown")
        with open(path, newline="") as f:
            rows = [r for r in csv.DictReader(f) if r.get("gpu")]
    return {(int(r["batch"]), int(r["T"])): r for r in rows}, int(m.group(2))


def main():
    a = parse_args()
    kernel = import_fla(a.fla_path)
    check_kernel_options(kernel, a.preset)
    shape = PRESETS[a.preset]
    import torch
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: nothing measured")
    batches = [int(x) for x in a.batches.split(",")]
    Ts = [int(x) for x in a.T.split(",")]
    proj, layers = project_times(a.cli, a.preset, a.batches, a.T, a.repeats)
    rows = []
    print(f"# {torch.cuda.get_device_name(0)}; per layer ({a.preset} shapes, {layers} layers in the project's "
          "bench, fp32 [V,K] state, bf16 activations)")
    print("| batch | T | ReplaySSM step us | FLA full-state spec us | ratio | fused step us | fused ratio | "
          "FLA decode us | project verify us | project commit us |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for b in batches:
        for T in Ts:
            p = proj.get((b, T))
            if p is None:
                sys.exit(f"the project's bench gave no row for batch {b}, T {T}")
            spec, dec = fla_times(kernel, b, T, a.repeats, **shape)
            step = float(p["step_replay_us"]) / layers
            if not p.get("step_fused_us"):
                sys.exit(f"the project's bench gave no fused step for batch {b}, T {T} (an older replayssm?)")
            fused = float(p["step_fused_us"]) / layers
            row = {"batch": b, "T": T, "replayssm_step_us": step, "fla_spec_us": spec, "ratio": spec / step,
                   "fused_step_us": fused, "fused_ratio": spec / fused,
                   "fla_decode_us": dec, "verify_us": float(p["verify_replay_us"]) / layers,
                   "commit_us": float(p["commit_replay_us"]) / layers, "copy_GBps": p["copy_GBps"]}
            rows.append(row)
            print(f"| {b} | {T} | {step:.1f} | {spec:.1f} | {spec / step:.2f}x | {fused:.1f} | {spec / fused:.2f}x | "
                  f"{dec:.1f} | "
                  f"{row['verify_us']:.1f} | {row['commit_us']:.1f} |")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
