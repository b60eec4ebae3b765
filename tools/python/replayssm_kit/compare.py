"""Tolerance spellings and the element-wise comparison, with the semantics of the C++ helper
(core/include/replayssm/compare.hpp and docs/fixture-format.md, section 6).

Both sides are widened to binary64 first.
  exact                   identical bits element by element (+0 differs from -0; a NaN only matches the
                          same NaN bit pattern);
  allclose(atol=A,rtol=R) every element |got - ref| <= A + R * |ref|;
  rel_rms(Q)              sqrt(sum (got - ref)^2 / sum ref^2) <= Q over the finite elements;
  budget(rel_rms=Q,atol=A) both RMS(got - ref) <= Q * max(1, RMS(ref)) (RMS over all n elements, the squares
                          summed over the finite ones) and every element |got - ref| <= A: the precision
                          tiers' form (replayssm_kit.tiers).
Non-finite values: for allclose and rel_rms a NaN in both is accepted, any other non-finite value must be
identical in both; a NaN where ref is finite always fails. When ref is all zeros, rel_rms requires got to be
all zeros too. Every report names the worst element.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

_NUM = r"([0-9.eE+-]+)"
_ALLCLOSE = re.compile(r"allclose\(atol=" + _NUM + r",rtol=" + _NUM + r"\)")
_RELRMS = re.compile(r"rel_rms\(" + _NUM + r"\)")
_BUDGET = re.compile(r"budget\(rel_rms=" + _NUM + r",atol=" + _NUM + r"\)")


def _number(text: str, spelling: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"malformed number '{text}' in '{spelling}'") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"tolerance must be a finite non-negative number in '{spelling}'")
    return value


def _shortest(x: float) -> str:
    for p in range(1, 18):
        s = f"{x:.{p}g}"
        if float(s) == x:
            return s
    return repr(x)


@dataclass(frozen=True)
class Tolerance:
    kind: str  # "exact", "allclose", "rel_rms" or "budget"
    atol: float = 0.0
    rtol: float = 0.0
    ratio: float = 0.0

    @staticmethod
    def parse(text: str) -> "Tolerance":
        if text == "exact":
            return Tolerance("exact")
        m = _ALLCLOSE.fullmatch(text)
        if m:
            return Tolerance("allclose", atol=_number(m.group(1), text), rtol=_number(m.group(2), text))
        m = _RELRMS.fullmatch(text)
        if m:
            return Tolerance("rel_rms", ratio=_number(m.group(1), text))
        m = _BUDGET.fullmatch(text)
        if m:
            return Tolerance("budget", ratio=_number(m.group(1), text), atol=_number(m.group(2), text))
        raise ValueError(f"cannot parse tolerance '{text}' (expected exact, allclose(atol=A,rtol=R), rel_rms(Q) or "
                         f"budget(rel_rms=Q,atol=A))")

    def __str__(self) -> str:
        if self.kind == "allclose":
            return f"allclose(atol={_shortest(self.atol)},rtol={_shortest(self.rtol)})"
        if self.kind == "rel_rms":
            return f"rel_rms({_shortest(self.ratio)})"
        if self.kind == "budget":
            return f"budget(rel_rms={_shortest(self.ratio)},atol={_shortest(self.atol)})"
        return "exact"


@dataclass
class Report:
    ok: bool
    count: int = 0
    mismatches: int = 0
    worst_index: int = 0  # flat row-major index
    worst_coords: tuple = ()
    worst_ref: float = 0.0
    worst_got: float = 0.0
    max_abs: float = 0.0
    worst_excess: float = 0.0
    rel_rms: float = 0.0
    message: str = ""

    def __str__(self) -> str:
        return self.message


def _g(x: float) -> str:
    return f"{x:.9g}"


def compare(ref, got, tol: Tolerance | str) -> Report:
    """Compares got against ref under tol. Arrays of equal shape (or equal length when flat)."""
    if isinstance(tol, str):
        tol = Tolerance.parse(tol)
    ref = np.asarray(ref)
    got = np.asarray(got)
    shape = ref.shape
    a = ref.astype(np.float64).ravel()
    b = got.astype(np.float64).ravel()
    if a.size != b.size:
        return Report(False, message=f"FAIL length mismatch: ref has {a.size} elements, got has {b.size}")
    n = a.size
    finite = np.isfinite(a) & np.isfinite(b)
    same_bits = a.view(np.uint64) == b.view(np.uint64)
    both_nan = np.isnan(a) & np.isnan(b)
    nonfinite_bad = ~finite & ~(same_bits | ((tol.kind != "exact") & both_nan))
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.where(finite, np.abs(a - b), 0.0)
    score = np.zeros(n)
    bad = nonfinite_bad.copy()
    worst_excess = 0.0
    if tol.kind == "exact":
        fb = finite & ~same_bits
        bad |= fb
        score = np.where(fb, np.where(d > 0, d, 1e-300), 0.0)
    elif tol.kind in ("allclose", "budget"):
        bound = tol.atol + tol.rtol * np.abs(np.where(finite, a, 0.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(bound > 0, d / np.where(bound > 0, bound, 1.0), np.where(d > 0, np.inf, 0.0))
        score = np.where(finite, ratio, 0.0)
        bad |= finite & (d > bound)
        if finite.any():
            worst_excess = float(score[finite].max())
    else:
        score = d.copy()
    score = np.where(~finite, np.where(nonfinite_bad, np.inf, 0.0), score)
    sum_d2 = float(np.sum(d[finite] ** 2))
    sum_r2 = float(np.sum(a[finite] ** 2))
    rel = math.sqrt(sum_d2 / sum_r2) if sum_r2 > 0 else (math.inf if sum_d2 > 0 else 0.0)
    mismatches = int(bad.sum())
    ok = mismatches == 0
    if tol.kind == "rel_rms" and not rel <= tol.ratio:
        ok = False
    if tol.kind == "budget" and n > 0 and not math.sqrt(sum_d2 / n) <= tol.ratio * max(1.0, math.sqrt(sum_r2 / n)):
        ok = False
    r = Report(ok, count=n, mismatches=mismatches, rel_rms=rel, worst_excess=worst_excess)
    r.max_abs = float(d.max()) if n else 0.0
    if n:
        i = int(np.argmax(score))
        r.worst_index = i
        r.worst_coords = tuple(int(c) for c in np.unravel_index(i, shape)) if shape else ()
        r.worst_ref, r.worst_got = float(a[i]), float(b[i])
    msg = (f"{'ok' if ok else 'FAIL'} [{tol}] n={n} mismatches={mismatches} max_abs={_g(r.max_abs)} "
           f"rel_rms={_g(rel)}")
    if tol.kind in ("allclose", "budget"):
        msg += f" worst_excess={_g(worst_excess)}"
    if n:
        msg += f" worst@{r.worst_index} {list(r.worst_coords)} ref={_g(r.worst_ref)} got={_g(r.worst_got)}"
    r.message = msg
    return r
