"""The rows of a step or commit as the kit hands them to a Target, and the error a Target raises to refuse a
command. The bottom of the kit's target side: it imports nothing of the kit (docs/target-protocol.md, "The
Python kit's modules")."""

from __future__ import annotations

from dataclasses import dataclass

PAD_SLOT = -1

# The columns of the kit's index table (Rows.index): one int32 row per batch row. PAD_SLOT-style sentinels are
# kept as the judge sent them; `pad` is 1 for a row that is_pad (a PAD row or a graph tail row), else 0.
INDEX_FIELDS = ("slot", "write_slot", "T", "token_offset", "accepted", "pad")


class TargetError(Exception):
    """Raise it to refuse a command: serve() answers {"ok": false, "error": {"field", "message"}} and keeps
    serving. `field` names what is refused ("rows[2].slot", "setup.config.K"); the judge reports it as
    target.<command>.<field>. Any other exception is answered the same way with an empty field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Row:
    """One row of a step's batch (docs/target-protocol.md, "Rows of a step").

    slot          checkpoint read (and, in place, written); PAD_SLOT (-1) for a PAD row, which reads and
                  writes no state at all;
    write_slot    where the commit writes (== slot in place; -1: no write);
    T, token_offset  the row's window in the packed tokens: [token_offset, token_offset + T);
    kind          "verify" (committed later by commit() with `accepted`) or "prefill" (the whole window is
                  committed by the step itself, from a zero state when `fresh`);
    accepted      in commit(): n in [0, T] for verify rows (0 commits nothing and leaves the slot's bytes
                  unchanged); in step(): T for prefill rows, 0 for verify rows (not known yet).
    graph_tail    (protocol 1.2) a row of a captured batch beyond live_rows: its fields are stale (slot ids of an
                  earlier, larger batch) or PAD; it is a PAD row whatever its slot says;
    pad_sentinel  the slot PAD rows carry under the case's PAD convention (-1, 0 for "null_block", num_slots - 1
                  for "pad_slot"; docs/target-protocol.md, "Graph padding, PAD conventions and out-of-place commits").
    """

    slot: int
    write_slot: int
    T: int
    token_offset: int
    accepted: int
    kind: str
    fresh: bool
    graph_tail: bool = False
    pad_sentinel: int = PAD_SLOT

    @property
    def is_pad(self) -> bool:
        """No state may be read or written for this row: a PAD row (the convention's sentinel) or a graph tail."""
        return self.graph_tail or self.slot == self.pad_sentinel

    @property
    def is_prefill(self) -> bool:
        return self.kind == "prefill"


class RowIndex:
    """The index arrays of a batch, as an engine hands them to a kernel: int32 arrays of length len(rows), one per
    field of INDEX_FIELDS (slot, write_slot, T, token_offset, accepted, pad).

    Every array is a **column view** of one persistent, capacity-sized table ([capacity, len(INDEX_FIELDS)]
    int32, C order; `table`): non-contiguous, with a stride of len(INDEX_FIELDS) * 4 bytes, and the table's rows
    beyond len(rows) hold what earlier, larger batches wrote there. That is how vLLM's mixed spec / non-spec
    batches reached its kernels (a strided column of a (1 + num_spec)-wide index table, vLLM issue 52792): read
    them through NumPy or torch indexing, or make them contiguous (np.ascontiguousarray, tensor.contiguous())
    before handing a pointer to a kernel. Code that takes the data pointer and assumes unit stride reads the
    other columns instead (docs/target-protocol.md, "Index arrays"). The arrays hold this call's rows until the
    next step or commit rewrites the table: copy them to keep them.
    """

    def __init__(self, table, n: int):
        self.table = table
        for c, name in enumerate(INDEX_FIELDS):
            setattr(self, name, table[:n, c])


class Rows(list):
    """The rows of a step or commit: a list of Row in batch order, plus `index`, the same rows as strided int32
    index arrays (RowIndex)."""

    index: RowIndex
    # Protocol 1.9 (graph_replay claimed): (rows, T) of the captured bucket this step or commit replays, or None
    # for every other step. A replayed step has exactly `rows` rows, every one T tokens wide, live rows first.
    replay = None


STEP_MIX_KEYS = ("one_width", "prefill_apart")


def step_mix_excess(rows, step_mix: dict) -> str:
    """"" when a step's rows mix no more than `step_mix` allows (docs/target-protocol.md, "What one step may mix";
    protocol 1.7), else what they mix. one_width: every row, PAD and graph tail rows included, has one T;
    prefill_apart: prefill chunks never beside verify rows, and a prefill step has no PAD or graph tail rows."""
    rows = list(rows)
    if step_mix.get("one_width"):
        for i, r in enumerate(rows):
            if r.T != rows[0].T:
                return f"row {i} is {r.T} tokens wide and row 0 {rows[0].T} (one width per step)"
    if step_mix.get("prefill_apart"):
        prefill = sum(1 for r in rows if not r.is_pad and r.is_prefill)
        verify = sum(1 for r in rows if not r.is_pad and not r.is_prefill)
        pad = len(rows) - prefill - verify
        if prefill and verify:
            return f"{prefill} prefill chunk(s) beside {verify} verify row(s) (prefill apart)"
        if prefill and pad:
            return f"{pad} PAD or graph tail row(s) pad a prefill step (prefill apart)"
    return ""


def integer(obj: dict, key: str, field: str, minimum: int | None = None) -> int:
    """obj[key] as an int (JSON integers only: true/false and 2.0 are refused); TargetError(field) otherwise."""
    if not isinstance(obj, dict) or key not in obj:
        raise TargetError(field, "is missing")
    x = obj[key]
    if type(x) is not int:
        raise TargetError(field, f"must be an integer, got {x!r}")
    if minimum is not None and x < minimum:
        raise TargetError(field, f"must be >= {minimum}, got {x}")
    return x
