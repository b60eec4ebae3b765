"""Trace fixtures through the kit alone: the NumPy example target passes every committed trace, each of its seeded
faults fails at the command it breaks, and a corrupted or unknown trace file is refused naming the field."""
import dataclasses
import json
import os
import shutil
import struct
import sys

import numpy as np
import pytest

from conftest import FIXTURES, HERE, REPO
import replayssm_kit as rk
from replayssm_kit.pytest_helper import assert_trace_passes, trace_params
from replayssm_kit.safetensors_io import read_safetensors, write_safetensors
from replayssm_kit.trace import TraceError, load_trace

sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
from numpy_replay import NumpyReplay  # noqa: E402

TRACES = os.path.join(FIXTURES, "traces")
ALL = rk.find_traces(TRACES)


def _rewrite(src, dst, meta=None, drop=None, change=None):
    """Copies a trace file with metadata keys replaced, a tensor dropped or one tensor's values changed."""
    tensors, dtypes, metadata = read_safetensors(src)
    metadata.update(meta or {})
    out = {}
    for name, arr in tensors.items():
        if name == drop:
            continue
        if change and name == change[0]:
            arr = change[1](arr.copy())
        out[name] = (arr, dtypes[name])
    write_safetensors(dst, out, metadata)
    return dst


@pytest.mark.parametrize("trace", trace_params(TRACES))
def test_the_numpy_example_passes_every_committed_trace(trace):
    result = assert_trace_passes(trace, NumpyReplay())
    assert result.judged == "fp32" and all(c.verdict == "PASS" for c in result.commands)


def test_the_committed_traces_cover_every_command_kind_and_pad_rows():
    assert len(ALL) >= 4, ALL
    seen = set()
    for path in ALL:
        t = load_trace(path)
        seen |= {t.model["op"]} | {"lifecycle." + c["kind"] for c in t.lifecycle}
        for c in t.commands:
            seen.add(c.op)
            seen |= {"commit.kept"} if c.kept else set()
            for r, note in zip(c.msg["rows"] if c.op in ("step", "commit") else [], c.notes):
                if t.is_pad(r):
                    seen.add("pad")
                elif c.op == "step" and r["kind"] == "prefill":
                    seen.add("prefill.fresh" if r["fresh"] else "prefill.chunk")
                elif c.op == "commit" and r["kind"] == "verify":
                    n, T = r["accepted"], r["T"]
                    seen.add("verify.n=0" if n == 0 else "verify.n=T" if n == T else "verify.0<n<T")
                    seen |= {"verify.early_stop"} if note["stop_at"] else set()
    goal = {"gdn", "kda", "allocate", "step", "commit", "copy_slot", "commit.kept", "pad", "prefill.fresh",
            "prefill.chunk", "verify.n=0", "verify.0<n<T", "verify.n=T", "verify.early_stop"}
    goal |= {"lifecycle." + k for k in ("admit", "step", "finish", "continue", "copy", "preempt", "resume")}
    assert goal <= seen, sorted(goal - seen)


# --- seeded faults: the command each one breaks first -----------------------------------------------------------
def _first_commit_with_accepted_resident(t):
    """off_by_one_accepted commits n - 1 tokens: the first commit of a verify row with n >= 1 whose written slot
    (write_slot: the slot itself, or another one for an out-of-place commit) is still resident afterwards (an
    early stop frees it, so its state is not checked) fails on that state."""
    for c in t.commands:
        if c.op != "commit":
            continue
        checked = {s for _, s, _ in c.states}
        if any(r["kind"] == "verify" and not t.is_pad(r) and r["accepted"] >= 1 and r["write_slot"] in checked
               for r in c.msg["rows"]):
            return c.index
    return None


def _first_step_with_prefill(t):
    """writes_gap spills into the gap whenever the example stores a state: first at a prefill."""
    return next(c.index for c in t.commands
                if c.op == "step" and any(not t.is_pad(r) and r["kind"] == "prefill" for r in c.msg["rows"]))


@pytest.mark.parametrize("path", ALL, ids=[os.path.basename(p) for p in ALL])
def test_off_by_one_accepted_fails_at_the_first_commit_whose_state_it_changes(path):
    t = load_trace(path)
    want = _first_commit_with_accepted_resident(t)
    result = rk.replay_trace(t, NumpyReplay("off_by_one_accepted"))
    if want is None:  # no checked state ever depends on the last accepted token: nothing to see, no false alarm
        assert result.ok, result.summary()
        return
    f = result.first_failure
    assert f is not None and f.index == want and f.check == "state", result.summary()
    assert f"command {want} (commit" in f.message and f"slot {f.slot}" in f.message and "worst@" in f.message
    assert f.expected is not None and f.got is not None and f.expected != f.got and len(f.coords) == 3
    assert all(c.verdict == "NOT RUN" for c in result.commands[want + 1:])


def test_most_committed_traces_can_see_an_off_by_one_commit():
    assert sum(_first_commit_with_accepted_resident(load_trace(p)) is not None for p in ALL) >= len(ALL) // 2


@pytest.mark.parametrize("path", ALL, ids=[os.path.basename(p) for p in ALL])
def test_writes_gap_fails_at_the_first_prefill_naming_the_gap(path):
    t = load_trace(path)
    want = _first_step_with_prefill(t)
    f = rk.replay_trace(t, NumpyReplay("writes_gap")).first_failure
    assert f is not None and f.index == want and f.check == "gap", f
    assert "the gap after the slot was written" in f.message and f.coords[0] >= t.E


def test_a_verify_capped_at_8_tokens_fails_exactly_the_traces_with_wider_windows():
    failed = []
    for path in ALL:
        t = load_trace(path)
        wide = any(c.op == "step" and any(r["kind"] == "verify" and r["T"] > 8 for r in c.msg["rows"])
                   for c in t.commands)
        f = rk.replay_trace(t, NumpyReplay("width_capped_at_8")).first_failure
        assert (f is not None) == wide, f"{os.path.basename(path)}: windows > 8: {wide}, failure: {f}"
        if f is not None:
            failed.append(os.path.basename(path))
            assert f.check == "outputs" and t.commands[f.index].op == "step", str(f)
    assert any("__widths_up_to_12__" in p for p in failed), failed


def test_pad_row_writes_slot0_fails_at_a_pad_step_naming_slot_0():
    caught = caught_at_capture = 0
    for path in ALL:
        t = load_trace(path)
        f = rk.replay_trace(t, NumpyReplay("pad_row_writes_slot0")).first_failure
        if f is None:
            continue  # a trace whose PAD rows never meet live data in slot 0 cannot see this fault
        caught += 1
        if f.op == "capture":  # a capture warms its bucket up on PAD rows: the fault commits them into slot 0
            assert f.slot == 0 and "slot 0" in f.message, str(f)
            caught_at_capture += 1
            continue
        step = f.index if f.op == "step" else f.index - 1
        assert t.commands[step].op == "step" and any(t.is_pad(r) for r in t.commands[step].msg["rows"]), str(f)
        assert f.slot == 0 and "slot 0" in f.message, str(f)
        # No earlier command could have seen it: slot 0 held no data before the first step that wrote it.
        first_write = next(c.index for c in t.commands
                           if (c.op == "step" and any(r["slot"] == 0 and not t.is_pad(r) for r in c.msg["rows"]))
                           or (c.op == "copy_slot" and c.msg["dst"] == 0)
                           or (c.op == "commit" and any(r["write_slot"] == 0 and r["accepted"] > 0
                                                        and not t.is_pad(r) for r in c.msg["rows"])))
        assert f.index >= first_write
    assert caught - caught_at_capture >= 1, "no committed trace catches a PAD row writing slot 0 at a step"


# --- claims and coverage ---------------------------------------------------------------------------------------------
class _NoCopy(NumpyReplay):
    def capabilities(self):
        return dict(super().capabilities(), copy_slot=False)


def test_a_trace_outside_the_capabilities_is_not_covered_never_passed():
    with_copy = [p for p in ALL if any(c.op == "copy_slot" for c in load_trace(p).commands)]
    assert with_copy
    result = rk.replay_trace(with_copy[0], _NoCopy())
    assert not result.covered and not result.ok and "copy_slot" in result.not_covered


def _moves(t, writing=False):
    """The trace commits a verify row out of place (writing: with n > 0, so that the commit writes somewhere)."""
    return any(r["kind"] == "verify" and r["slot"] >= 0 and r["write_slot"] not in (-1, r["slot"])
               and (r["accepted"] > 0 or not writing)
               for c in t.commands if c.op == "commit" for r in c.msg["rows"])


class _InPlaceOnly(NumpyReplay):
    def capabilities(self):
        return dict(super().capabilities(), out_of_place_commit=False)


class _CommitWritesReadSlot(NumpyReplay):
    """An out-of-place commit that also stores the new state into the read slot (a double buffer's slip)."""
    def commit(self, rows):
        super().commit(rows)
        for r in rows:
            if not r.is_pad and not r.is_prefill and r.write_slot not in (-1, r.slot) and r.accepted > 0:
                for pool in self.pools:
                    pool[r.slot, : self.E] = pool[r.write_slot, : self.E]


def test_out_of_place_commits_are_judged_only_when_claimed_and_the_read_slot_is_kept():
    moving = [p for p in ALL if _moves(load_trace(p))]
    assert any("__out_of_place__" in p for p in moving), moving
    for path in moving:
        result = rk.replay_trace(path, _InPlaceOnly())
        assert not result.covered and not result.ok and "out_of_place_commit" in result.not_covered
        if not _moves(load_trace(path), writing=True):
            continue  # its out-of-place commits all accept n = 0: nothing is written, the slip cannot show
        f = rk.replay_trace(path, _CommitWritesReadSlot()).first_failure
        assert f is not None and f.op == "commit" and f.check == "kept", f"{os.path.basename(path)}: {f}"
        assert f"slot {f.slot}" in f.message and "wrote another slot" in f.message


def test_the_judged_tier_follows_the_claim_or_the_argument():
    assert rk.replay_trace(ALL[0], NumpyReplay(), tier="bf16").judged == "bf16"

    class Exact(NumpyReplay):
        def capabilities(self):
            return dict(super().capabilities(), bit_exact=True)

    assert rk.replay_trace(ALL[0], Exact(), keep_going=True).judged == "exact"


# --- corrupted and unknown files ---------------------------------------------------------------------------------------
def test_a_corrupted_expectation_fails_naming_the_command_layer_slot_and_worst_element(tmp_path):
    src = next(p for p in ALL if "tiny-gdn" in p)
    t = load_trace(src)
    c = next(c for c in reversed(t.commands) if f"out.{c.index}.states" in t.fixture.tensors)
    # The state stored in row 0 of this command's own states tensor (an entry may point at another command's).
    layer, slot = next((l, s) for l, s, at, row in json.loads(t.fixture.metadata["commands"])[c.index]["states"]
                       if at == c.index and row == 0)

    def bump(arr):
        arr[0].reshape(-1)[5] += 0.5
        return arr

    bad = _rewrite(src, str(tmp_path / "bad.safetensors"), change=(f"out.{c.index}.states", bump))
    f = rk.replay_trace(bad, NumpyReplay()).first_failure
    assert f is not None and f.index == c.index and f.check == "state" and (f.layer, f.slot) == (layer, slot), f
    assert f.report.worst_index == 5 and abs(f.expected - f.got) > 0.4


def test_a_truncated_file_is_refused(tmp_path):
    bad = tmp_path / "cut.safetensors"
    shutil.copy(ALL[0], bad)
    with open(bad, "r+b") as fh:
        fh.truncate(os.path.getsize(bad) - 7)
    with pytest.raises(TraceError) as e:
        load_trace(str(bad))
    assert e.value.field == "file"


@pytest.mark.parametrize("meta,field", [({"trace_version": "2.0"}, "__metadata__.trace_version"),
                                        ({"trace_version": "one"}, "__metadata__.trace_version"),
                                        ({"tier_vocabulary": "9"}, "__metadata__.tier_vocabulary"),
                                        ({"pad_rule": "garbage"}, "__metadata__.pad_rule"),
                                        ({"commands": "[{\"op\": \"explode\"}]"}, "__metadata__.commands[0].op")])
def test_an_unknown_version_or_malformed_metadata_is_refused_naming_the_field(tmp_path, meta, field):
    bad = _rewrite(ALL[0], str(tmp_path / "bad.safetensors"), meta=meta)
    with pytest.raises(TraceError) as e:
        rk.replay_trace(bad, NumpyReplay())
    assert e.value.field == field, str(e.value)


def test_an_unknown_minor_version_is_refused_and_1_0_to_1_2_are_read(tmp_path):
    versions = {load_trace(p).version for p in ALL}
    assert versions == {"1.0", "1.1", "1.2"}, versions
    bad = _rewrite(ALL[0], str(tmp_path / "minor.safetensors"), meta={"trace_version": "1.3"})
    with pytest.raises(TraceError) as e:
        load_trace(bad)
    assert e.value.field == "__metadata__.trace_version" and "1.0 to 1.2" in str(e.value)


def test_a_missing_input_tensor_is_refused_naming_it(tmp_path):
    t = load_trace(ALL[0])
    step = next(c.index for c in t.commands if c.op == "step")
    bad = _rewrite(ALL[0], str(tmp_path / "bad.safetensors"), drop=f"in.{step}.v")
    with pytest.raises(TraceError) as e:
        load_trace(bad)
    assert e.value.field == f"tensor 'in.{step}.v'"


# --- the tier vocabulary is the C++ judge's ---------------------------------------------------------------------------
def test_kit_tier_tolerances_are_the_pinned_ones():
    with open(os.path.join(REPO, "core", "tests", "data", "tier_tolerances.json")) as fh:
        table = json.load(fh)
    assert table["vocabulary"] == rk.TIER_VOCABULARY
    for c in table["cases"]:
        assert str(rk.tier_tolerance(c["tier"], c["config"], c["scale"], c["state"])) == c["tolerance"], c


def test_budget_tolerance_has_a_statistical_and_a_worst_element_bound():
    tol = rk.Tolerance.parse("budget(rel_rms=0.01,atol=0.05)")
    assert str(tol) == "budget(rel_rms=0.01,atol=0.05)"
    ref = np.ones(100)
    assert rk.compare(ref, ref + 0.009, tol).ok
    assert not rk.compare(ref, ref + 0.02, tol).ok                            # RMS over the budget
    spike = ref.copy()
    spike[7] += 0.06
    r = rk.compare(ref, spike, tol)
    assert not r.ok and r.worst_index == 7 and r.mismatches == 1              # one element over atol


def test_a_corrupted_output_fails_at_its_step_naming_the_row_and_token(tmp_path):
    src = next(p for p in ALL if "tiny-kda" in p)
    t = load_trace(src)
    c, i, r = next((c, i, r) for c in t.commands if c.op == "step"
                   for i, r in enumerate(c.msg["rows"]) if not t.is_pad(r))
    token = r["token_offset"] + r["T"] - 1

    def bump(arr):
        arr[1, token, 1, 2] += 0.5  # layer 1, the row's last token, hv 1, v 2
        return arr

    bad = _rewrite(src, str(tmp_path / "bad.safetensors"), change=(f"out.{c.index}.o", bump))
    f = rk.replay_trace(bad, NumpyReplay()).first_failure
    assert f is not None and f.index == c.index and f.check == "outputs", f
    assert (f.layer, f.row, f.slot, f.coords) == (1, i, r["slot"], (token, 1, 2)), f
    assert f"worst element (token, hv, v) = ({token}, 1, 2)" in f.message


# --- trace format 1.1: captured steps (graph tails) and PAD conventions -----------------------------------------
GRAPH = os.path.join(TRACES, "tiny-gdn", "tiny-gdn__graph_stale_tail__0.safetensors")
NULL_BLOCK = os.path.join(TRACES, "tiny-gdn", "tiny-gdn__pad_null_block__0.safetensors")
PAD_SLOT = os.path.join(TRACES, "tiny-kda", "tiny-kda__pad_slot__0.safetensors")


class NoPadClaim(NumpyReplay):
    """PAD outputs are don't-care: a fault is judged by the states and slots it changes."""
    def capabilities(self):
        return dict(super().capabilities(), pad_outputs_zero=False)


class _WrapsMinusOne(NoPadClaim):
    """A PAD index -1 used as a Python index: the row runs as an ordinary row on the last slot (pool[-1])."""
    def _wrap(self, rows):
        return [dataclasses.replace(r, slot=self.S - 1, write_slot=self.S - 1, graph_tail=False, pad_sentinel=-2)
                if r.slot == -1 else r for r in rows]

    def step(self, rows, inputs):
        return super().step(self._wrap(rows), inputs)

    def commit(self, rows):
        super().commit(self._wrap(rows))


class _Eager(NumpyReplay):
    def capabilities(self):
        return dict(super().capabilities(), graph_padding=False, pad_conventions=["minus_one"], graph_replay=False)


def test_hazard_traces_are_1_1_and_name_their_convention_and_tail():
    g, n, p = load_trace(GRAPH), load_trace(NULL_BLOCK), load_trace(PAD_SLOT)
    assert (g.version, g.pad_convention, n.pad_convention, p.pad_convention) == ("1.1", "minus_one", "null_block", "pad_slot")
    assert (n.pad_sentinel, p.pad_sentinel) == (0, p.S - 1)
    tails = [(c, r) for c in g.commands if c.op == "step" for r in c.msg["rows"] if r.get("graph_tail")]
    assert any(r["slot"] >= 0 for _, r in tails) and any(r["slot"] == -1 for _, r in tails)
    for c, r in tails:  # sent as the protocol sends a captured batch; a stale slot no live row writes is kept
        assert c.msg["live_rows"] == sum(not x.get("graph_tail") for x in c.msg["rows"])
        live = {s for x in c.msg["rows"] if not g.is_pad(x) for s in (x["slot"], x["write_slot"])}
        assert r["slot"] < 0 or r["slot"] in live or r["slot"] in c.unchanged


def test_a_target_that_processes_the_graph_tail_or_wraps_minus_one_fails_the_captured_trace():
    assert rk.replay_trace(GRAPH, NumpyReplay()).ok
    f = rk.replay_trace(GRAPH, NumpyReplay("graph_tail_processed")).first_failure
    # Its tail outputs are not the zeros it claims (pad_outputs_zero): seen at the step itself.
    assert f is not None and f.check == "pad" and "(graph tail)" in f.message, str(f)

    # Without that claim the outputs are don't-care: the stale slot the tail committed into is what fails.
    f = rk.replay_trace(GRAPH, NoPadClaim("graph_tail_processed")).first_failure
    stale = {r["slot"] for c in load_trace(GRAPH).commands if c.op == "step"
             for r in c.msg["rows"] if r.get("graph_tail") and r["slot"] >= 0}
    assert f is not None and f.check in ("unchanged", "state") and f.slot in stale, str(f)
    f = rk.replay_trace(GRAPH, _WrapsMinusOne()).first_failure
    assert f is not None and f.check in ("unchanged", "state") and f.slot == load_trace(GRAPH).S - 1, str(f)


def test_pad_slot_trace_catches_slot_0_taken_for_pad():
    assert rk.replay_trace(PAD_SLOT, NumpyReplay()).ok
    f = rk.replay_trace(PAD_SLOT, NumpyReplay("pad_row_writes_slot0")).first_failure
    assert f is not None and f.slot == 0, str(f)


def test_a_target_without_graph_padding_or_the_convention_is_not_covered():
    for path, claim in ((GRAPH, "graph_padding"), (NULL_BLOCK, "pad_conventions"), (PAD_SLOT, "pad_conventions")):
        result = rk.replay_trace(path, _Eager())
        assert not result.covered and not result.ok and result.not_covered.startswith(claim), result.not_covered
    assert rk.replay_trace(os.path.join(TRACES, "tiny-gdn", "tiny-gdn__trace__0.safetensors"), _Eager()).ok


def _edit_commands(src, dst, fn):
    _, _, meta = read_safetensors(src)
    cmds = json.loads(meta["commands"])
    fn(cmds)
    return _rewrite(src, dst, meta={"commands": json.dumps(cmds)})


def test_1_1_content_in_a_1_0_file_and_inconsistent_tails_are_refused_naming_the_field(tmp_path):
    t = load_trace(GRAPH)
    c = next(c for c in t.commands if c.op == "step" and "live_rows" in c.msg)
    i = next(i for i, r in enumerate(c.msg["rows"]) if r.get("graph_tail"))
    cases = [
        (_rewrite(GRAPH, str(tmp_path / "v10.safetensors"), meta={"trace_version": "1.0"}),
         None),  # the first tail row, wherever it is
        (_edit_commands(GRAPH, str(tmp_path / "live.safetensors"),
                        lambda cs: cs[c.index].update(live_rows=cs[c.index]["live_rows"] + 1)),
         f"__metadata__.commands[{c.index}].live_rows"),
        (_rewrite(NULL_BLOCK, str(tmp_path / "nb10.safetensors"), meta={"trace_version": "1.0"}),
         "__metadata__.config.setup.pad_convention"),
        (_rewrite(NULL_BLOCK, str(tmp_path / "nbconv.safetensors"), meta={"pad_convention": "pad_slot"}),
         "__metadata__.pad_convention"),
    ]
    for path, field in cases:
        with pytest.raises(TraceError) as e:
            load_trace(path)
        if field is None:
            assert e.value.field.endswith(".graph_tail"), str(e.value)
        else:
            assert e.value.field == field, str(e.value)
    stale = next((c2, r) for c2 in t.commands if c2.op == "step" for r in c2.msg["rows"]
                 if r.get("graph_tail") and r["slot"] >= 0 and r["slot"] in c2.unchanged)
    c2, r = stale
    bad = _edit_commands(GRAPH, str(tmp_path / "unch.safetensors"),
                         lambda cs: cs[c2.index]["unchanged"].remove(r["slot"]))
    with pytest.raises(TraceError) as e:
        load_trace(bad)
    assert e.value.field == f"__metadata__.commands[{c2.index}].unchanged", str(e.value)


# --- trace format 1.2: captures of a CUDA-graph bucket while requests are live (H13) ----------------------------
CAPTURE = os.path.join(TRACES, "tiny-gdn", "tiny-gdn__capture_while_live__0.safetensors")


class _NoCapture(NumpyReplay):
    def capabilities(self):
        return dict(super().capabilities(), capture=False, graph_replay=False)


def test_the_capture_trace_is_1_2_and_captures_while_requests_are_live():
    t = load_trace(CAPTURE)
    assert t.version == "1.2"
    caps = [c for c in t.commands if c.op == "capture"]
    assert caps and all(set(c.msg) == {"op", "rows", "T"} and c.unchanged == list(range(t.S)) for c in caps)
    assert any(c.states for c in caps), "no capture while a request holds a committed state"
    # only a trace with a capture says 1.2 (the capture trace, and the grouped traces recorded with captures)
    captured = {p for p in ALL if any(c.op == "capture" for c in load_trace(p).commands)}
    assert CAPTURE in captured and all((load_trace(p).version == "1.2") == (p in captured) for p in ALL)


def test_capture_writes_live_state_fails_the_capture_trace_at_a_capture():
    assert rk.replay_trace(CAPTURE, NumpyReplay()).ok
    t = load_trace(CAPTURE)
    result = rk.replay_trace(CAPTURE, NumpyReplay("capture_writes_live_state"))
    f = result.first_failure
    assert f is not None and t.commands[f.index].op == "capture", str(f)
    assert f.check in ("state", "unchanged") and 0 <= f.slot < t.S, str(f)
    # Every other trace with captures while live catches it too; a trace without captures cannot.
    for p in ALL:
        captures_live = any(c.op == "capture" and c.states for c in load_trace(p).commands)
        assert rk.replay_trace(p, NumpyReplay("capture_writes_live_state")).ok != captures_live, p


def test_a_target_without_capture_is_not_covered_by_the_capture_trace():
    result = rk.replay_trace(CAPTURE, _NoCapture())
    assert not result.covered and not result.ok and result.not_covered.startswith("capture"), result.not_covered
    assert rk.replay_trace(os.path.join(TRACES, "tiny-gdn", "tiny-gdn__trace__0.safetensors"), _NoCapture()).ok


def test_a_capture_it_cannot_hold_is_refused_naming_the_field(tmp_path):
    t = load_trace(CAPTURE)
    i = next(c.index for c in t.commands if c.op == "capture")
    f = f"__metadata__.commands[{i}]"
    cases = [(_rewrite(CAPTURE, str(tmp_path / "v11.safetensors"), meta={"trace_version": "1.1"}), f + ".op"),
             (_edit_commands(CAPTURE, str(tmp_path / "r0.safetensors"), lambda cs: cs[i].update(rows=0)), f + ".rows"),
             (_edit_commands(CAPTURE, str(tmp_path / "rbig.safetensors"), lambda cs: cs[i].update(rows=t.S + 9)),
              f + ".rows"),
             (_edit_commands(CAPTURE, str(tmp_path / "T.safetensors"), lambda cs: cs[i].update(T=t.max_T + 1)), f + ".T"),
             (_edit_commands(CAPTURE, str(tmp_path / "unch.safetensors"), lambda cs: cs[i]["unchanged"].pop()),
              f + ".unchanged")]
    for path, field in cases:
        with pytest.raises(TraceError) as e:
            load_trace(path)
        assert e.value.field == field, str(e.value)
        if field.endswith(".op"):
            assert "1.2" in str(e.value), str(e.value)
