"""Captured buckets replayed (protocol 1.9, graph_replay): claimed only with capture and graph_padding and only to a
1.9 judge; a step's and commit's `replay` reaches the target as rows.replay, checked against the buckets the case
captured and against the rows; the NumPy example passes its campaign with replays, and each of its graph replay
faults (a persistent buffer kept from the bucket's first replay) is caught by a default campaign."""
import pytest

from test_exec_e2e import COMMAND
from test_serve import HELLO, ROW, Fake, session, setup_cmd, step_cmd
from replayssm_kit.pytest_helper import fuzz_target

HELLO_1_9 = {**HELLO, "version": [1, 9]}


class Replays(Fake):
    def capabilities(self):
        return {"name": "replays", "max_T": 4, "graph_padding": True, "graph_replay": True}

    def capture(self, rows, T):
        self.calls.append(("capture", rows, T))


def _replayed(rows, C, W):
    """A step of `rows` (dicts) replaying bucket (C, W), with its tensors."""
    cmd, tensors = step_cmd(n=sum(r["T"] for r in rows))
    live = sum(1 for r in rows if not r.get("graph_tail"))
    return ({**cmd, "rows": rows, "total_tokens": sum(r["T"] for r in rows), "live_rows": live,
             "replay": {"rows": C, "T": W}}, tensors)


def _rows(C, W, live):
    rows = [dict(ROW, slot=i, write_slot=i, T=W, token_offset=i * W) for i in range(live)]
    return rows + [dict(ROW, slot=-1, write_slot=-1, T=W, token_offset=i * W, graph_tail=True) for i in range(live, C)]


def test_a_replay_reaches_the_target_as_rows_replay_on_step_and_commit():
    t = Replays()
    step, tensors = _replayed(_rows(2, 2, 1), 2, 2)
    commit = {"op": "commit", "rows": step["rows"], "live_rows": 1, "replay": {"rows": 2, "T": 2}}
    a = session(t, HELLO_1_9, setup_cmd(), {"op": "capture", "rows": 2, "T": 2}, (step, tensors), commit)
    assert a[0].msg["capabilities"]["graph_replay"] is True
    assert all(x.msg["ok"] for x in a[1:]), [x.msg for x in a]
    steps = [c for c in t.calls if c[0] in ("step", "commit")]
    assert [c[1].replay for c in steps] == [(2, 2), (2, 2)]
    plain, tensors = step_cmd()
    session(t, HELLO_1_9, setup_cmd(), (plain, tensors))
    assert t.calls[-1][1].replay is None  # an eager step replays nothing


@pytest.mark.parametrize("edit,field", [
    (lambda s: s.update(replay={"rows": 4, "T": 2}), "replay"),           # a bucket never captured
    (lambda s: s.update(replay={"rows": 2}), "replay"),                   # malformed
    (lambda s: s["rows"].pop(), "rows"),                                  # fewer rows than the bucket
    (lambda s: s["rows"][0].update(T=1), "rows[0].T"),                    # a row of another width
    (lambda s: s["rows"][0].update(kind="prefill"), "rows[0].kind"),      # a prefill chunk
])
def test_a_replay_that_does_not_fit_what_the_case_captured_is_refused_by_name(edit, field):
    t = Replays()
    step, tensors = _replayed(_rows(2, 2, 1), 2, 2)
    edit(step)
    a = session(t, HELLO_1_9, setup_cmd(), {"op": "capture", "rows": 2, "T": 2}, (step, tensors))
    assert not a[3].msg["ok"] and a[3].msg["error"]["field"] == field, a[3].msg
    assert not any(c[0] == "step" for c in t.calls)


def test_graph_replay_needs_capture_graph_padding_and_a_1_9_judge():
    class NoPadding(Replays):
        def capabilities(self):
            return {**super().capabilities(), "graph_padding": False}

    class NoCapture(Fake):
        def capabilities(self):
            return {"graph_padding": True, "graph_replay": True}

    class Malformed(Replays):
        def capabilities(self):
            return {**super().capabilities(), "graph_replay": "yes"}

    for target in (NoPadding(), NoCapture(), Malformed()):
        assert session(target, HELLO_1_9)[0].msg["error"]["field"] == "capabilities.graph_replay"
    t = Replays()
    step, tensors = _replayed(_rows(2, 2, 1), 2, 2)
    a = session(t, {**HELLO, "version": [1, 8]}, setup_cmd(), {"op": "capture", "rows": 2, "T": 2}, (step, tensors))
    assert "graph_replay" not in a[0].msg["capabilities"]
    assert not a[3].msg["ok"] and a[3].msg["error"]["field"] == "replay"  # never claimed to that judge


def test_the_example_replays_its_buckets_in_a_default_campaign(cli, tmp_path):  # noqa: F811
    ok = fuzz_target(COMMAND, preset="tiny-gdn", cases=20, seed=4, dump_dir=str(tmp_path), complete=False)
    assert ok[0]["cases_passed"] == 20 and ok[0]["not_covered"] == ""
    replays = ok[0]["coverage"]["graph_replays"]
    assert replays["replays"] > 0 and replays["other_slots"] > 0, replays


@pytest.mark.parametrize("fault", ["graph_replay_slots_baked", "graph_replay_live_rows_baked",
                                   "graph_replay_accepted_baked"])
def test_each_graph_replay_fault_of_the_example_is_caught(cli, tmp_path, fault):  # noqa: F811
    with pytest.raises(pytest.fail.Exception) as e:
        fuzz_target(f"{COMMAND} --fault {fault}", preset="tiny-gdn", cases=100, seed=1, dump_dir=str(tmp_path))
    assert "replays rows=" in str(e.value), str(e.value)
