"""Peer fixtures from flash-linear-attention's fused Triton kernels (GPU only; not run yet).

fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule / chunk_gated_delta_rule and
fla.ops.kda.fused_recurrent_kda / chunk_kda with use_qk_l2norm_in_kernel=True, fp32 inputs, [K,V] states,
q/k at H heads (the kernels map value head hv to key head hv // (HV // H)); gates from FLA's naive gate
functions (fp32), beta = sigmoid(b). The kernels' in-kernel l2norm divides by sqrt(sum x^2 + eps)
(config l2norm div_sqrt).

Tolerances are stated, not yet measured: fused_recurrent is a binary32 recurrence like the naive one
(allclose(2e-6 * max|ref|, 1e-5), as the other fp32 peers); the chunk kernels round normalized q/k, w, u and
the per-chunk states to the input dtype and use exp2 of pre-scaled gates, so with fp32 inputs they get
rel_rms(2e-5) plus an elementwise allclose(1e-4 * max|ref|, 1e-3). Check the written files with
`replayssm check fixtures/peer/fla-fused` and tighten or explain in docs/peer-conformance.md before committing.

Run on a machine with an NVIDIA GPU: pip install flash-linear-attention (wheels can be carried offline), then
python tools/peer/gen_fla_fused.py
"""

from __future__ import annotations

import sys

import torch

import peer_common as pc
from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
from fla.ops.gated_delta_rule.gate import naive_gdn_gate
from fla.ops.kda import chunk_kda, fused_recurrent_kda
from fla.ops.kda.gate import naive_kda_gate

NOTE_REC = ("allclose(atol = 2e-6 * max|ref| rounded up, rtol = 1e-5): binary32 recurrence against the binary64 "
            "reference, as the other fp32 peer fixtures.")
NOTE_CHUNK = ("allclose(atol = 1e-4 * max|ref| rounded up, rtol = 1e-3): the chunk kernels store intermediates (w, u, "
              "per-chunk states) in the input dtype and use exp2 of pre-scaled gates; fp32 inputs keep that at "
              "binary32 rounding of O(C) accumulations.")


def run_case(name, kind, seed, T, H, HV, K, V, chunk=None):
    dev = "cuda"
    kda = "kda" in kind
    q, k, v, a, b, A_log, dt_bias, h0 = pc.delta_rule_inputs(seed, T, H, HV, K, V, kda)
    gd = naive_kda_gate(a, A_log, dt_bias) if kda else naive_gdn_gate(a, A_log, dt_bias)
    beta = b.sigmoid()
    args = [x.to(dev) for x in (q, k, v, gd, beta)]
    fn = {"gdn_rec": fused_recurrent_gated_delta_rule, "gdn_chunk": chunk_gated_delta_rule,
          "kda_rec": fused_recurrent_kda, "kda_chunk": chunk_kda}[kind]
    with torch.no_grad():
        o, s = fn(*args, initial_state=h0.to(dev), output_final_state=True, use_qk_l2norm_in_kernel=True)
    o, s = o.float().cpu(), s.float().cpu()
    op = "chunked" if chunk else "recurrent"
    config = pc.case_config(name, "kda" if kda else "gdn", H, HV, K, V, chunk, act="F32", layout="kv",
                            l2norm="div_sqrt")
    tensors = pc.layer_tensors(q, k, v, a, b, h0, A_log, dt_bias.reshape(HV, K) if kda else dt_bias, o, s)
    rel, rtol = (1e-4, 1e-3) if chunk else (2e-6, 1e-5)
    tol = {"out.o": pc.f32_tolerance(o, rel, rtol), "out.state": pc.f32_tolerance(s, rel, rtol)}
    pc.write(name, op, config, tensors, tol, seed=seed, generator=pc.GENERATOR,
             functions=[f"{fn.__module__}.{fn.__name__}"], extra_versions=("fla", "triton"),
             notes=f"device {torch.cuda.get_device_name(0)}; use_qk_l2norm_in_kernel=True; fp32 inputs; "
                   "gates from FLA's naive gate functions; beta = sigmoid(b); initial_state randn.",
             tolerance_note=NOTE_CHUNK if chunk else NOTE_REC, subdir="fla-fused")


def main():
    if not torch.cuda.is_available():
        sys.exit("gen_fla_fused.py needs a CUDA GPU (FLA's fused kernels are Triton)")
    run_case("fla-fused-gdn__recurrent__H16_HV32_K128_T8", "gdn_rec", 601, 8, 16, 32, 128, 128)
    run_case("fla-fused-gdn__chunked__H2_HV4_K100_T75_C64", "gdn_chunk", 602, 75, 2, 4, 100, 100, chunk=64)
    run_case("fla-fused-kda__recurrent__H2_HV4_K64_T32", "kda_rec", 603, 32, 2, 4, 64, 64)
    run_case("fla-fused-kda__chunked__H2_HV2_K64_T75_C64", "kda_chunk", 604, 75, 2, 2, 64, 64, chunk=64)


if __name__ == "__main__":
    main()
