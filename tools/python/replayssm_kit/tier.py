"""Precision tiers: the tolerance an implementation claiming a tier is judged under, the same function as the
C++ judge's (core/include/replayssm/tier.hpp; derivation in docs/numerics.md, "Precision tiers").

    fp32  IEEE fp32 arithmetic and storage of every intermediate
    tf32  dot products with TF32 operands (10 explicit mantissa bits, rounded to nearest), fp32 state
    bf16  bf16 storage of per-token intermediates or records, fp32 arithmetic and state

tier_tolerance(tier, model, scale, state) takes the fixture's model configuration (a dict with act_dtype,
state_dtype, round_beta_to_act and K, as in fixture configs), the largest magnitude of the reference tensor
and whether a committed state (True) or an output (False) is compared.
"""

from __future__ import annotations

import math

from .compare import Tolerance

TIERS = ("fp32", "tf32", "bf16")


def unit_roundoff(tier: str) -> float:
    """fp32 2^-24, tf32 2^-11, bf16 2^-9."""
    try:
        return {"fp32": 2.0 ** -24, "tf32": 2.0 ** -11, "bf16": 2.0 ** -9}[tier]
    except KeyError:
        raise ValueError(f"unknown precision tier '{tier}' (known: {', '.join(TIERS)})") from None


def tier_tolerance(tier: str, model: dict, scale: float, state: bool) -> Tolerance:
    u = unit_roundoff(tier)
    m = max(1.0, float(scale))
    bf16_storage = (model.get("state_dtype") == "BF16" or (not state and model.get("act_dtype", "BF16") == "BF16")
                    or bool(model.get("round_beta_to_act", False)))
    storage_atol = m * 2.0 ** -6 if bf16_storage else 0.0
    if tier == "fp32":
        return Tolerance("allclose", atol=max(2e-5 * m, storage_atol), rtol=0.0)
    storage_rms = 2.0 ** -7 if bf16_storage else 0.0
    return Tolerance("budget", ratio=8.0 * u + storage_rms, atol=max(16.0 * u * m, storage_atol))


def is_state_tensor(name: str) -> bool:
    """Whether a fixture output holds a committed state or pool (compared as a state) rather than outputs."""
    base = name.removeprefix("out.")
    return "state" in base or "pool" in base
