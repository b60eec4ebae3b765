"""Peer fixtures from HF transformers' Qwen3.5 Gated DeltaNet torch functions.

Calls transformers.models.qwen3_5.modeling_qwen3_5.torch_recurrent_gated_delta_rule and
torch_chunk_gated_delta_rule (the pure torch reference paths; the hub/FLA dispatch wrapper around them is
bypassed through __wrapped__ so the result never depends on which optional kernels are installed), with
use_qk_l2norm_in_kernel=True, q/k repeated to the value heads the way Qwen3_5GatedDeltaNet.forward does
(repeat_interleave(HV // H, dim=2)), and the layer's gate formulas:
    beta = b.sigmoid()                                   (in the dtype of b: bf16 in a bf16 model)
    g    = -A_log.float().exp() * softplus(a.float() + dt_bias)
The fixture stores the raw a, b, A_log, dt_bias, so `replayssm check` recomputes the gates itself.

Run: HF_HUB_OFFLINE=1 python tools/peer/gen_transformers_gdn.py   (CPU is enough)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import peer_common as pc
from transformers.models.qwen3_5 import modeling_qwen3_5 as mq

DELTA_RULE = pc.TorchDeltaRule(mq, "torch_recurrent_gated_delta_rule", "torch_chunk_gated_delta_rule")
FN_GATE = "Qwen3_5GatedDeltaNet.forward gates: beta = b.sigmoid(); g = -A_log.float().exp() * softplus(a.float() + dt_bias)"

TOL_F32 = ("out.o and out.state: allclose(atol = {ao:g} * max|ref| rounded up, rtol = {r:g}). The peer computes in "
           "binary32 and the reference in binary64: every element is a sum of K products of O(max|ref|) terms, so "
           "rounding leaves errors of a few 2^-24 * sqrt(K) * max|ref|; the state map is a contraction, so errors do "
           "not grow with T. Measured worst errors stay below a quarter of this bound (docs/peer-conformance.md).")
TOL_BF16 = ("out.o: allclose(atol = {ao:g} * max|ref| rounded up, rtol = 2^-7): the peer rounds its output to bf16 "
            "once (half an ulp: at most 2^-8 of the value), with 2x margin, plus binary32 noise near zero. out.state "
            "stays binary32: same bound as the fp32 fixtures.")


def make_inputs(seed, T, H, HV, K, V, dtype):
    """pc.delta_rule_inputs (GDN) with the activations q, k, v, a, b in `dtype`."""
    q, k, v, a, b, A_log, dt_bias, h0 = pc.delta_rule_inputs(seed, T, H, HV, K, V)
    return [x.to(dtype) for x in (q, k, v, a, b)] + [A_log, dt_bias, h0]


def run_case(name, op, seed, T, H, HV, K, V, dtype=torch.float32, chunk=None, rtol=1e-5, atol_rel=2e-6):
    q, k, v, a, b, A_log, dt_bias, h0 = make_inputs(seed, T, H, HV, K, V, dtype)
    # Qwen3_5GatedDeltaNet.forward, gate lines.
    beta = b.sigmoid()
    gdecay = -A_log.float().exp() * F.softplus(a.float() + dt_bias)
    G = HV // H
    qr, kr = (q.repeat_interleave(G, dim=2), k.repeat_interleave(G, dim=2)) if G > 1 else (q, k)
    o, state, fn = DELTA_RULE(op, qr, kr, v, gdecay, beta, h0, chunk)
    bf16 = dtype == torch.bfloat16
    act = "BF16" if bf16 else "F32"
    config = pc.case_config(name, "gdn", H, HV, K, V, chunk, act=act, layout="kv", l2norm="rsqrt_mul",
                            round_beta=bf16)
    tensors = pc.layer_tensors(q, k, v, a, b, h0, A_log, dt_bias, o, state, act=act)
    tol_state = pc.f32_tolerance(state, atol_rel, rtol)
    if bf16:
        tol_o = pc.rk.Tolerance("allclose", atol=pc.nice(atol_rel * pc.scale_of(o.float())), rtol=2.0 ** -7)
        note = TOL_BF16.format(ao=atol_rel)
    else:
        tol_o = pc.f32_tolerance(o, atol_rel, rtol)
        note = TOL_F32.format(ao=atol_rel, r=rtol)
    notes = (f"q/k repeat_interleave({G}, dim=2) before the call as Qwen3_5GatedDeltaNet.forward does; "
             f"use_qk_l2norm_in_kernel=True; initial_state randn [1, HV, K, V] ([K,V] layout); "
             + (f"chunk_size={chunk}; " if chunk else "")
             + ("inputs bf16: beta = b.sigmoid() is computed and rounded in bf16 as in a bf16 model "
                "(config round_beta_to_act), the output is returned in bf16; " if bf16 else "inputs fp32; ")
             + "A_log = log(1 + 15 U[0,1)), dt_bias, a, b, q, k, v, h0 standard normal.")
    pc.write(name, op, config, tensors, {"out.o": tol_o, "out.state": tol_state}, seed=seed,
             generator=pc.GENERATOR, functions=[fn, FN_GATE], notes=notes, tolerance_note=note,
             subdir="transformers")


def main():
    torch.set_num_threads(2)
    # Real Qwen3.5 linear-attention heads (H = 16, HV = 32, K = V = 128), multi-chunk with an initial state.
    run_case("hf-qwen3_5__chunked__H16_HV32_K128_T24_C16", "chunked", 101, 24, 16, 32, 128, 128, chunk=16)
    # Small GVA (ratio 3) with K != V, both functions; the chunked one at the default chunk size 64.
    run_case("hf-qwen3_5__recurrent__H2_HV6_K32_V48_T20", "recurrent", 102, 20, 2, 6, 32, 48)
    run_case("hf-qwen3_5__chunked__H2_HV6_K32_V48_T70_C64", "chunked", 103, 70, 2, 6, 32, 48, chunk=64)
    # A bf16 model's view: bf16 activations, beta rounded to bf16, bf16 output.
    run_case("hf-qwen3_5-bf16__recurrent__H2_HV4_K64_T12", "recurrent", 104, 12, 2, 4, 64, 64, dtype=torch.bfloat16)
    run_case("hf-qwen3_5-bf16__chunked__H2_HV4_K64_T40_C16", "chunked", 105, 40, 2, 4, 64, 64, dtype=torch.bfloat16,
             chunk=16)


if __name__ == "__main__":
    main()
