"""Captured buckets of the NumPy example as a CUDA graph holds them (protocol 1.9, graph_replay).

A graph records kernel launches whose arguments are device pointers: the bucket's persistent index buffers
(slot, write_slot, graph tail flag, accepted) and its live row count. A replay changes nothing in the recorded
launches; the engine copies the step's metadata into those buffers first, and the kernels read only them. So the
rows the example's "kernels" run for a replayed step are the buffers' contents (CapturedGraph.launch_rows), which
equal the step's rows exactly when every buffer was refreshed.

The graph replay faults (GRAPH_FAULTS) each skip one refresh after the bucket's first replay, as an engine that
fills a buffer only when the bucket is new (or hands the graph a host scalar at capture time) does:
graph_replay_slots_baked keeps the slot, write_slot and tail buffers of the first replay, graph_replay_live_rows_baked
its live row count (rows beyond it run as graph tail), graph_replay_accepted_baked the accepted counts of its commit.
Only a later replay of the bucket with other slots, another live row count or other accepted counts shows them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

GRAPH_FAULTS = ("graph_replay_slots_baked", "graph_replay_live_rows_baked", "graph_replay_accepted_baked")


class CapturedGraph:
    """One captured bucket: `rows` rows of T tokens, and its persistent index buffers."""

    def __init__(self, rows: int, T: int, fault: str | None):
        self.rows, self.T, self.fault = rows, T, fault
        self.slot = np.full(rows, -1, dtype=np.int32)
        self.write_slot = np.full(rows, -1, dtype=np.int32)
        self.tail = np.ones(rows, dtype=bool)
        self.accepted = np.zeros(rows, dtype=np.int32)
        self.live = 0
        self.steps = 0    # replayed steps so far
        self.commits = 0  # replayed commits so far

    def _check(self, rows: list) -> None:
        if len(rows) != self.rows:
            raise ValueError(f"{len(rows)} rows replay a bucket of {self.rows}")

    def load_step(self, rows: list) -> list:
        """Copies a replayed step's metadata into the buffers (the faults skip one copy after the first replay)
        and returns the rows its kernels run: the step's windows with the buffers' slots and tail flags."""
        self._check(rows)
        first = self.steps == 0
        self.steps += 1
        if first or self.fault != "graph_replay_slots_baked":
            self.slot[:] = [r.slot for r in rows]
            self.write_slot[:] = [r.write_slot for r in rows]
            self.tail[:] = [r.graph_tail for r in rows]
        if first or self.fault != "graph_replay_live_rows_baked":
            self.live = next((i for i, r in enumerate(rows) if r.graph_tail), len(rows))
        return self._launch(rows, [r.accepted for r in rows])

    def load_commit(self, rows: list) -> list:
        """Copies a replayed commit's accepted counts into the buffer (graph_replay_accepted_baked: the first
        commit's only) and returns the rows its commit kernel runs; slots and tail flags are the step's."""
        self._check(rows)
        first = self.commits == 0
        self.commits += 1
        if first or self.fault != "graph_replay_accepted_baked":
            self.accepted[:] = [r.accepted for r in rows]
        return self._launch(rows, [min(int(a), r.T) for a, r in zip(self.accepted, rows)])

    def _launch(self, rows: list, accepted: list) -> list:
        return [dataclasses.replace(r, slot=int(self.slot[i]), write_slot=int(self.write_slot[i]),
                                    graph_tail=bool(self.tail[i]) or i >= self.live, accepted=int(accepted[i]))
                for i, r in enumerate(rows)]
