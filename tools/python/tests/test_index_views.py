"""The kit's index arrays (H6, vLLM issue 52792): every step and commit hands a target its rows both as Row objects
and as int32 index arrays that are strided column views of one persistent, capacity-sized table, so a target that
passes them to a kernel by pointer, assuming unit stride, reads other columns. The NumPy example reads its slots
through them: correct, it passes the committed traces; with strided_index_as_contiguous, a trace whose batches
hold more than one row fails."""
import os
import sys

import numpy as np
import pytest

from conftest import FIXTURES, HERE
import replayssm_kit as rk
from replayssm_kit.target import INDEX_FIELDS, Row
from test_serve import HELLO, ROW, S, Fake, session, setup_cmd, step_cmd

sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
from numpy_replay import NumpyReplay  # noqa: E402

TRACES = os.path.join(FIXTURES, "traces")


def _rows(*rows):
    return [{**ROW, **r} for r in rows]


class Records(Fake):
    """Keeps a copy of every step's index arrays as they were during the call (the next call rewrites the table)."""
    def step(self, rows, inputs):
        self.seen = getattr(self, "seen", []) + [{n: getattr(rows.index, n).tolist() for n in INDEX_FIELDS}]
        return super().step(rows, inputs)


def test_index_arrays_are_strided_columns_of_a_persistent_capacity_sized_table():
    t = Records()
    wide = _rows({"slot": 2, "write_slot": 0, "T": 1, "token_offset": 0}, {"slot": -1, "write_slot": -1, "T": 1,
                                                                          "token_offset": 1})
    narrow = _rows({"slot": 1, "write_slot": 1, "T": 2, "token_offset": 0, "accepted": 0})
    step_wide, tensors = step_cmd(n=2)
    step_narrow, tensors2 = step_cmd(n=2)
    a = session(t, HELLO, setup_cmd(), ({**step_wide, "rows": wide}, tensors), ({**step_narrow, "rows": narrow}, tensors2))
    assert all(x.msg["ok"] for x in a), [x.msg for x in a]
    steps = [c[1] for c in t.calls if c[0] == "step"]
    first, second = steps
    assert all(isinstance(r, Row) for r in first)
    idx = first.index
    table = idx.table
    assert table.shape == (S + 8, len(INDEX_FIELDS)) and table.dtype == np.int32
    for name in INDEX_FIELDS:
        col = getattr(idx, name)
        assert col.dtype == np.int32 and not col.flags["C_CONTIGUOUS"] and col.strides == (4 * len(INDEX_FIELDS),)
        assert np.shares_memory(col, table)
    seen = t.seen[0]
    assert seen["slot"] == [2, -1] and seen["write_slot"] == [0, -1] and seen["pad"] == [0, 1]
    assert seen["token_offset"] == [0, 1] and seen["T"] == [1, 1] and seen["accepted"] == [0, 0]
    # The next, smaller batch rewrites row 0 only; row 1 of the table keeps the earlier batch's PAD row.
    assert second.index.table is table and second.index.slot.tolist() == [1]
    assert table[1, INDEX_FIELDS.index("slot")] == -1 and table[1, INDEX_FIELDS.index("token_offset")] == 1


def test_commit_rows_carry_the_accepted_counts_in_their_index():
    t = Fake()
    commit = {"op": "commit", "rows": _rows({"accepted": 2})}
    session(t, HELLO, setup_cmd(), step_cmd(), commit)
    rows = [c[1] for c in t.calls if c[0] == "commit"][0]
    assert rows.index.accepted.tolist() == [2] and rows.index.slot.tolist() == [1]


# Every committed trace has a batch of two rows or more (PAD rows count: a kernel reads their indices too).
@pytest.mark.parametrize("path", rk.find_traces(TRACES), ids=os.path.basename)
def test_reading_the_index_arrays_by_pointer_fails_every_committed_trace_and_reading_them_properly_passes(path):
    assert rk.replay_trace(path, NumpyReplay()).ok
    bad = rk.replay_trace(path, NumpyReplay("strided_index_as_contiguous"))
    failed = [c for c in bad.commands if c.verdict != "PASS"]
    assert not bad.ok and failed and failed[0].message.startswith("command "), failed
