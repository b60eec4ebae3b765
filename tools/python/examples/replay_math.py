"""The GDN / KDA token step in float32 NumPy, vectorized over value heads (docs/math.md; operation order of
reference/recurrence/include/replayssm/recurrence/gdn.hpp). Per token and value head hv, with its key head hv // G:

  1. k <- k / sqrt(sum k^2 + eps) (rsqrt_mul: k * (1 / sqrt(...)); div_sqrt: k / sqrt(...)); q likewise,
     then q <- q * scale (scale = q_scale, or K^-1/2 when q_scale is 0).
  2. x = a + dt_bias; GDN: g = -exp(A_log) softplus(x); KDA per key channel: the same, or
     g = lower_bound * sigmoid(exp(A_log) x); alpha = exp(g); beta = sigmoid(b) (rounded to bf16 when
     round_beta_to_act and the activations are bf16).
  3. S <- alpha S;  kv = S^T k;  d = beta (v - kv);  S <- S + k d^T;  o = S^T q.

Every operation is one float32 operation; only the order of the sums (NumPy's, not the reference's
ascending k) differs, which is what the fp32 precision tier's tolerance covers.
"""

from __future__ import annotations

import math

import numpy as np

from replayssm_kit import bf16_bits_to_f32, f32_to_bf16_bits
from replayssm_kit.target import TargetError

F32 = np.float32


def round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to nearest even bf16 values (kept as float32)."""
    return bf16_bits_to_f32(f32_to_bf16_bits(x))


class Recurrence:
    """The token step of one model configuration (the `config` object of a setup)."""

    def __init__(self, cfg: dict, eps_outside_sqrt: bool = False):
        self.op = cfg["op"]
        self.eps_outside_sqrt = eps_outside_sqrt  # the l2norm_eps_outside_sqrt fault: x / (sqrt(sum(x^2)) + eps)
        self.H, self.HV, self.K, self.V = cfg["H"], cfg["HV"], cfg["K"], cfg["V"]
        self.G = self.HV // self.H
        self.l2norm = cfg["l2norm"]
        if self.l2norm not in ("rsqrt_mul", "div_sqrt"):
            raise TargetError("setup.config.l2norm", f"{self.l2norm!r} is not implemented (rsqrt_mul, div_sqrt)")
        self.kda_gate = cfg["kda_gate"]
        if self.op == "kda" and self.kda_gate not in ("softplus", "lower_bound_sigmoid"):
            raise TargetError("setup.config.kda_gate", f"{self.kda_gate!r} is not implemented")
        self.eps = F32(cfg["l2_eps"])
        self.scale = F32(cfg["q_scale"] if cfg["q_scale"] != 0 else 1.0 / math.sqrt(self.K))
        self.lower_bound = F32(cfg["lower_bound"])
        self.round_beta = bool(cfg["round_beta_to_act"]) and cfg["act_dtype"] == "BF16"

    def normalize(self, x: np.ndarray, mul) -> np.ndarray:
        """x [H, K] -> normalised (and multiplied by mul) rows, repeated to value heads: [HV, K]."""
        s = np.sum(x * x, axis=-1, keepdims=True, dtype=F32)
        den = np.sqrt(s) + self.eps if self.eps_outside_sqrt else np.sqrt(s + self.eps)
        y = x * (F32(1) / den) if self.l2norm == "rsqrt_mul" else x / den
        return np.repeat(y * F32(mul), self.G, axis=0)

    def gates(self, A_log, dt_bias, a: np.ndarray, b: np.ndarray):
        """(alpha [HV, K, 1] or [HV, 1, 1], beta [HV, 1]) of one token; a [HV, a_width], b [HV]."""
        with np.errstate(over="ignore"):
            x = a + dt_bias
            eA = np.exp(A_log)[:, None]
            if self.op == "kda" and self.kda_gate == "lower_bound_sigmoid":
                g = self.lower_bound * (F32(1) / (F32(1) + np.exp(-(eA * x))))
            else:
                softplus = np.where(x > F32(20), x, np.log1p(np.exp(np.minimum(x, F32(20)))))
                g = -eA * softplus
            beta = F32(1) / (F32(1) + np.exp(-b))
        if self.round_beta:
            beta = round_bf16(beta)
        return np.exp(g)[:, :, None], beta[:, None]

    def token(self, S: np.ndarray, params, k, v, a, b, q=None):
        """Advances S [HV, K, V] (float32, in place) by one token; returns o [HV, V] when q is given."""
        A_log, dt_bias = params
        kn = self.normalize(k, 1)
        alpha, beta = self.gates(A_log, dt_bias, a, b)
        S *= alpha
        kv = np.einsum("hk,hkv->hv", kn, S)
        d = beta * (v - kv)
        S += kn[:, :, None] * d[:, None, :]
        if q is None:
            return None
        return np.einsum("hk,hkv->hv", self.normalize(q, self.scale), S)
