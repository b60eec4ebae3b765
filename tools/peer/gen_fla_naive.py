"""Peer fixtures from flash-linear-attention's pure torch references (run on CPU).

Functions: fla.ops.gated_delta_rule.naive.naive_recurrent_gated_delta_rule / naive_chunk_gated_delta_rule with
fla.ops.gated_delta_rule.gate.naive_gdn_gate, and fla.ops.kda.naive.naive_recurrent_kda / naive_chunk_kda with
fla.ops.kda.gate.naive_kda_gate; beta = sigmoid(b). The naive functions take already normalized q and k, so
they are normalized here the way FLA's own tests build their references, with torch.nn.functional.normalize
(x / max(||x||, 1e-12)); the fixtures declare l2norm div_sqrt (eps 1e-6 inside the root, the kernels' form).
For vectors of norm ~sqrt(K) the two differ by ~1e-6 / (2 ||x||^2), far below binary32 rounding
(docs/peer-conformance.md has the small-norm case). The GDN naive functions have no GVA: q and k are repeated
to the value heads first (einops-style block repeat, as FLA's tests do); the KDA ones take H < HV natively.

The fused Triton kernels (fused_recurrent_gated_delta_rule, fused_recurrent_kda, chunk_*) need a GPU:
gen_fla_fused.py is the script for them.

Run: python tools/peer/gen_fla_naive.py   (pip install flash-linear-attention; CPU is enough)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import peer_common as pc
from fla.ops.gated_delta_rule import naive as gnaive
from fla.ops.gated_delta_rule.gate import naive_gdn_gate
from fla.ops.kda import naive as knaive
from fla.ops.kda.gate import naive_kda_gate

TOL = ("out.o and out.state: allclose(atol = {ao:g} * max|ref| rounded up, rtol = {r:g}). Binary32 peer against the "
       "binary64 reference (K-term sums, contraction over tokens). q/k were normalized with F.normalize while the "
       "reference uses eps = 1e-6 inside the root: a relative difference of ~1e-6 / (2 ||x||^2) ~ 1e-8 here.")


def run_case(name, fn_name, seed, T, H, HV, K, V, chunk=None, rtol=1e-5, atol_rel=2e-6):
    kda = "kda" in fn_name
    q, k, v, a, b, A_log, dt_bias, h0 = pc.delta_rule_inputs(seed, T, H, HV, K, V, kda)
    qn, kn = F.normalize(q, p=2, dim=-1), F.normalize(k, p=2, dim=-1)
    beta = b.sigmoid()
    with torch.no_grad():
        if kda:
            gd = naive_kda_gate(a, A_log, dt_bias)
            gate_fn = "fla.ops.kda.gate.naive_kda_gate"
            if chunk:
                o, s = knaive.naive_chunk_kda(qn, kn, v, gd, beta, initial_state=h0, output_final_state=True,
                                              chunk_size=chunk)
            else:
                o, s = knaive.naive_recurrent_kda(qn, kn, v, gd, beta, initial_state=h0, output_final_state=True)
        else:
            gd = naive_gdn_gate(a, A_log, dt_bias)
            gate_fn = "fla.ops.gated_delta_rule.gate.naive_gdn_gate"
            G = HV // H
            qr, kr = qn.repeat_interleave(G, dim=2), kn.repeat_interleave(G, dim=2)
            if chunk:
                o, s = gnaive.naive_chunk_gated_delta_rule(qr, kr, v, gd, beta, chunk_size=chunk, initial_state=h0,
                                                           output_final_state=True)
            else:
                o, s = gnaive.naive_recurrent_gated_delta_rule(qr, kr, v, beta, gd, initial_state=h0,
                                                               output_final_state=True)
    fn = {"naive_recurrent_gated_delta_rule": "fla.ops.gated_delta_rule.naive.naive_recurrent_gated_delta_rule",
          "naive_chunk_gated_delta_rule": "fla.ops.gated_delta_rule.naive.naive_chunk_gated_delta_rule",
          "naive_recurrent_kda": "fla.ops.kda.naive.naive_recurrent_kda",
          "naive_chunk_kda": "fla.ops.kda.naive.naive_chunk_kda"}[fn_name]
    op = "chunked" if chunk else "recurrent"
    config = pc.case_config(name, "kda" if kda else "gdn", H, HV, K, V, chunk, act="F32", layout="kv",
                            l2norm="div_sqrt")
    tensors = pc.layer_tensors(q, k, v, a, b, h0, A_log, dt_bias.reshape(HV, K) if kda else dt_bias, o, s)
    tol = {"out.o": pc.f32_tolerance(o, atol_rel, rtol), "out.state": pc.f32_tolerance(s, atol_rel, rtol)}
    notes = ("q, k normalized with F.normalize(p=2, dim=-1) before the call (FLA test convention); "
             + ("" if kda else "q/k repeat_interleave(HV // H, dim=2) (the naive GDN functions need H == HV); ")
             + f"beta = sigmoid(b); g = {gate_fn}(a, A_log, dt_bias); initial_state randn [1, HV, K, V]"
             + (f"; chunk_size={chunk}" if chunk else "") + ".")
    pc.write(name, op, config, tensors, tol, seed=seed, generator=pc.GENERATOR, functions=[fn, gate_fn],
             notes=notes, tolerance_note=TOL.format(ao=atol_rel, r=rtol), extra_versions=("fla",), subdir="fla")


def main():
    torch.set_num_threads(2)
    run_case("fla-naive-gdn__recurrent__H2_HV4_K64_T32", "naive_recurrent_gated_delta_rule", 301, 32, 2, 4, 64, 64)
    run_case("fla-naive-gdn__chunked__H1_HV2_K100_T75_C64", "naive_chunk_gated_delta_rule", 302, 75, 1, 2, 100, 100,
             chunk=64)
    run_case("fla-naive-kda__recurrent__H2_HV4_K32_V48_T24", "naive_recurrent_kda", 303, 24, 2, 4, 32, 48)
    run_case("fla-naive-kda__chunked__H1_HV2_K60_T64_C16", "naive_chunk_kda", 304, 64, 1, 2, 60, 60, chunk=16)


if __name__ == "__main__":
    main()
