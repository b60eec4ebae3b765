"""The comparison semantics must be those of core/include/replayssm/compare.hpp."""
import math

import numpy as np
import pytest

from replayssm_kit import Tolerance, compare


def test_spellings_round_trip_and_reject_garbage():
    for s in ["exact", "allclose(atol=1e-05,rtol=0.0001)", "rel_rms(0.002)", "allclose(atol=0,rtol=0.00390625)"]:
        assert str(Tolerance.parse(s)) == s
    for bad in ["Exact", "allclose(atol=1e-5e3,rtol=0)", "rel_rms(-1)", "allclose(atol=1e-5, rtol=0)", "rel_rms()"]:
        with pytest.raises(ValueError):
            Tolerance.parse(bad)


def test_exact_distinguishes_signed_zero_and_nan_payloads():
    assert compare([0.0, 1.0], [0.0, 1.0], "exact").ok
    r = compare([0.0, 1.0], [-0.0, 1.0], "exact")
    assert not r.ok and r.worst_index == 0 and r.mismatches == 1
    nan1 = np.array([np.nan])
    nan2 = np.array([0x7FF8000000000001], dtype=np.uint64).view(np.float64)
    assert compare(nan1, nan1.copy(), "exact").ok
    assert not compare(nan1, nan2, "exact").ok
    assert compare(nan1, nan2, "allclose(atol=0,rtol=0)").ok  # any NaN matches any NaN for tolerances


def test_nan_where_ref_is_finite_always_fails():
    for tol in ["allclose(atol=1,rtol=1)", "rel_rms(1)"]:
        r = compare([1.0, 2.0, 3.0], [1.0, np.nan, 3.0], tol)
        assert not r.ok and r.worst_index == 1
    assert not compare([np.inf], [np.inf * -1], "allclose(atol=1,rtol=1)").ok
    assert compare([np.inf], [np.inf], "allclose(atol=0,rtol=0)").ok


def test_allclose_names_the_worst_element_by_excess():
    ref = np.array([[1.0, 100.0], [0.0, 5.0]])
    got = ref.copy()
    got[0, 1] += 0.5   # within rtol 1e-2 of 100 (bound 1.001): excess 0.5
    got[1, 0] += 0.01  # bound 0.001: excess 10 -> the worst
    r = compare(ref, got, Tolerance("allclose", atol=1e-3, rtol=1e-2))
    assert not r.ok and r.mismatches == 1
    assert r.worst_index == 2 and r.worst_coords == (1, 0)
    assert math.isclose(r.worst_excess, 10.0, rel_tol=1e-9)
    assert "worst@2 [1, 0]" in r.message


def test_rel_rms_and_all_zero_reference():
    ref = np.ones(100)
    got = ref + 1e-3
    assert compare(ref, got, "rel_rms(0.002)").ok
    assert not compare(ref, got, "rel_rms(0.0005)").ok
    assert compare(np.zeros(3), np.zeros(3), "rel_rms(0.1)").ok
    assert not compare(np.zeros(3), [0, 1e-9, 0], "rel_rms(0.1)").ok


def test_length_mismatch_is_a_failed_report():
    r = compare([1.0, 2.0], [1.0], "exact")
    assert not r.ok and "length mismatch" in r.message
