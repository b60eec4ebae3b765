"""Peer fixtures from HF transformers' Kimi Linear delta attention (KDA) torch functions.

The forget gate comes from the real gate module, transformers...kimi_linear.KimiLinearForgetGate (random
weights): its f_b_proj output (hooked) is the raw gate input `a` [T, H, K], its A_log (1,1,H,1) and
dt_bias [H*K] are the layer parameters, and its forward output is the g handed to
recurrent_kimi_delta_attention / chunk_kimi_delta_attention (pure torch paths, reached through __wrapped__ so
optional kernels never replace them), with beta = sigmoid(b) in fp32 and use_qk_l2norm_in_kernel=True. The
Kimi module has as many q/k heads as value heads (H = HV); its l2norm divides by sqrt(sum x^2 + eps)
(config l2norm div_sqrt).

Run: HF_HUB_OFFLINE=1 python tools/peer/gen_transformers_kda.py
"""

from __future__ import annotations

import torch

import peer_common as pc
from transformers.models.kimi_linear import modeling_kimi_linear as mk
from transformers.models.kimi_linear.configuration_kimi_linear import KimiLinearConfig

DELTA_RULE = pc.TorchDeltaRule(mk, "recurrent_kimi_delta_attention", "chunk_kimi_delta_attention")
FN_GATE = "transformers.models.kimi_linear.modeling_kimi_linear.KimiLinearForgetGate.forward"

TOL = ("out.o and out.state: allclose(atol = {ao:g} * max|ref| rounded up, rtol = {r:g}). Binary32 peer against the "
       "binary64 reference: K-term sums of O(max|ref|) values; the per-channel decay map is a contraction. The Kimi "
       "gate evaluates softplus as log(1 + exp(x)) in binary32, which loses relative accuracy for x << 0, but the "
       "absolute error of g stays about 2^-24 * exp(A_log), far inside the bound (docs/peer-conformance.md).")


def gate_module(seed, H, K, hidden):
    cfg = KimiLinearConfig(hidden_size=hidden, linear_num_heads=H, linear_head_dim=K)
    torch.manual_seed(seed)
    gate = mk.KimiLinearForgetGate(cfg).float().eval()
    g = pc.torch_generator(seed + 1)
    with torch.no_grad():
        gate.f_a_proj.weight.copy_(torch.randn(gate.f_a_proj.weight.shape, generator=g) / hidden ** 0.5)
        gate.f_b_proj.weight.copy_(torch.randn(gate.f_b_proj.weight.shape, generator=g) / K ** 0.5)
        gate.dt_bias.copy_(torch.randn(gate.dt_bias.shape, generator=g) - 1.0)
        gate.A_log.copy_(torch.log(1 + 15 * torch.rand(gate.A_log.shape, generator=g)))
    return gate


def run_case(name, op, seed, T, H, K, V, chunk=None, rtol=1e-5, atol_rel=2e-6):
    hidden = 64
    gate = gate_module(seed, H, K, hidden)
    g = pc.torch_generator(seed)
    x = torch.randn(1, T, hidden, generator=g)
    q = torch.randn(1, T, H, K, generator=g)
    k = torch.randn(1, T, H, K, generator=g)
    v = torch.randn(1, T, H, V, generator=g)
    b = torch.randn(1, T, H, generator=g)
    h0 = torch.randn(1, H, K, V, generator=g)
    captured = {}
    hook = gate.f_b_proj.register_forward_hook(lambda m, i, o: captured.__setitem__("a", o.detach().clone()))
    with torch.no_grad():
        gdecay = gate(x)  # [1, T, H, K]
        hook.remove()
        beta = torch.sigmoid(b.float())
    o, state, fn = DELTA_RULE(op, q, k, v, gdecay, beta, h0, chunk)
    a = captured["a"].reshape(1, T, H, K)
    config = pc.case_config(name, "kda", H, H, K, V, chunk, act="F32", layout="kv", l2norm="div_sqrt",
                            kda_gate="softplus")
    tensors = pc.layer_tensors(q, k, v, a, b, h0, gate.A_log.detach().reshape(H), gate.dt_bias.detach().reshape(H, K),
                               o, state)
    tol = {"out.o": pc.f32_tolerance(o, atol_rel, rtol), "out.state": pc.f32_tolerance(state, atol_rel, rtol)}
    notes = ("gate: KimiLinearForgetGate with random f_a_proj/f_b_proj on random hidden states; in.a is the hooked "
             "f_b_proj output (the gate input before dt_bias), param.A_log = A_log.reshape(H), param.dt_bias = "
             "dt_bias.reshape(H, K); beta = sigmoid(b) in fp32 as KimiLinearDeltaAttention.forward; "
             "use_qk_l2norm_in_kernel=True; initial_state randn [1, H, K, V]; inputs fp32"
             + (f"; chunk_size={chunk}" if chunk else "") + ".")
    pc.write(name, op, config, tensors, tol, seed=seed, generator=pc.GENERATOR, functions=[fn, FN_GATE],
             notes=notes, tolerance_note=TOL.format(ao=atol_rel, r=rtol), subdir="transformers")


def main():
    torch.set_num_threads(2)
    # Kimi Linear's head dimension (K = V = 128) with 4 of its 32 heads.
    run_case("hf-kimi_linear__recurrent__H4_K128_T16", "recurrent", 201, 16, 4, 128, 128)
    run_case("hf-kimi_linear__recurrent__H2_K32_V48_T20", "recurrent", 202, 20, 2, 32, 48)
    run_case("hf-kimi_linear__chunked__H2_K32_V48_T40_C16", "chunked", 203, 40, 2, 32, 48, chunk=16)


if __name__ == "__main__":
    main()
