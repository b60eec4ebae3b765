"""What a `setup` command fixes for the rest of a case (sizes and dtypes), and the parsing of the commands'
fields into Python values. Errors are TargetError naming the field inside the command."""

from __future__ import annotations

import numpy as np

from .rows import INDEX_FIELDS, Row, RowIndex, Rows, TargetError, integer  # noqa: F401 (integer: the kit's field reader)

DTYPES = ("F32", "BF16")




PAD_CONVENTIONS = ("minus_one", "null_block", "pad_slot")


def parse_rows(rows, pad_sentinel: int = -1, live_rows=None) -> list:
    """The `rows` of a step or commit as Row objects. Rows from live_rows on (protocol 1.2) must be the graph
    tail: exactly the rows marked graph_tail."""
    if not isinstance(rows, list):
        raise TargetError("rows", "must be an array of rows")
    out = []
    for i, r in enumerate(rows):
        f = f"rows[{i}]"
        if not isinstance(r, dict):
            raise TargetError(f, "must be an object")
        kind, fresh = r.get("kind"), r.get("fresh")
        if kind not in ("verify", "prefill"):
            raise TargetError(f + ".kind", f"must be 'verify' or 'prefill', got {kind!r}")
        if type(fresh) is not bool:
            raise TargetError(f + ".fresh", f"must be true or false, got {fresh!r}")
        tail = r.get("graph_tail", False)
        if type(tail) is not bool:
            raise TargetError(f + ".graph_tail", f"must be true or false, got {tail!r}")
        out.append(Row(slot=integer(r, "slot", f + ".slot", -1), write_slot=integer(r, "write_slot", f + ".write_slot", -1),
                       T=integer(r, "T", f + ".T", 0), token_offset=integer(r, "token_offset", f + ".token_offset", 0),
                       accepted=integer(r, "accepted", f + ".accepted", 0), kind=kind, fresh=fresh,
                       graph_tail=tail, pad_sentinel=pad_sentinel))
    live = len(out) if live_rows is None else live_rows
    if type(live) is not int or not 0 <= live <= len(out):
        raise TargetError("live_rows", f"must be an integer in [0, {len(out)}], got {live!r}")
    for i, row in enumerate(out):
        if row.graph_tail != (i >= live):
            raise TargetError(f"rows[{i}].graph_tail", f"is {row.graph_tail}, but live_rows is {live}")
    return out


def _tensor(frame, name: str, dtype: str, shape: tuple) -> np.ndarray:
    if name not in frame.tensors:
        raise TargetError(name, "is missing from the command")
    if frame.dtypes[name] != dtype:
        raise TargetError(name, f"has dtype {frame.dtypes[name]}, expected {dtype}")
    arr = frame.tensors[name]
    if tuple(arr.shape) != tuple(shape):
        raise TargetError(name, f"has shape {list(arr.shape)}, expected {list(shape)}")
    return np.ascontiguousarray(arr, dtype=np.float32)  # BF16 arrives widened exactly to float32


class Session:
    """Sizes and dtypes of one case: L layers, S slots, stride, E = HV*K*V, act and state dtypes."""

    @staticmethod
    def parse(setup, poison_bits) -> "Session":
        if not isinstance(setup, dict):
            raise TargetError("setup", "must be an object")
        cfg = setup.get("config")
        if not isinstance(cfg, dict):
            raise TargetError("setup.config", "must be an object")
        s = Session()
        s.setup = setup
        c = "setup.config."
        s.H, s.HV, s.K, s.V = (integer(cfg, k, c + k, 1) for k in ("H", "HV", "K", "V"))
        s.L = integer(cfg, "num_layers", c + "num_layers", 1)
        s.op = cfg.get("op", "gdn")
        if s.op not in ("gdn", "kda"):
            raise TargetError(c + "op", f"must be 'gdn' or 'kda', got {s.op!r}")
        s.act, s.state = cfg.get("act_dtype", "BF16"), cfg.get("state_dtype", "F32")
        for key, value in (("act_dtype", s.act), ("state_dtype", s.state)):
            if value not in DTYPES:
                raise TargetError(c + key, f"must be F32 or BF16, got {value!r}")
        s.layout = cfg.get("layout", "vk")
        if s.layout not in ("kv", "vk"):
            raise TargetError(c + "layout", f"must be 'kv' or 'vk', got {s.layout!r}")
        if s.HV % s.H:
            raise TargetError(c + "HV", f"{s.HV} is not a multiple of H = {s.H}")
        s.a_width = 1 if s.op == "gdn" else s.K
        s.E = s.HV * s.K * s.V
        s.S = integer(setup, "num_slots", "setup.num_slots", 1)
        stride = integer(setup, "slot_stride", "setup.slot_stride", 0)
        if 0 < stride < s.E:
            raise TargetError("setup.slot_stride", f"is {stride}, less than HV*K*V = {s.E}")
        s.stride = stride or s.E
        conv = setup.get("pad_convention", "minus_one")
        if conv not in PAD_CONVENTIONS:
            raise TargetError("setup.pad_convention", f"must be one of {', '.join(PAD_CONVENTIONS)}, got {conv!r}")
        if conv != "minus_one" and s.S < 2:
            raise TargetError("setup.pad_convention", f"{conv!r} reserves a slot and needs num_slots >= 2")
        s.pad_convention = conv
        s.pad_sentinel = {"minus_one": -1, "null_block": 0, "pad_slot": s.S - 1}[conv]
        if not isinstance(poison_bits, str):
            raise TargetError("poison_bits", f"must be a hexadecimal string, got {poison_bits!r}")
        try:
            bits = int(poison_bits, 16)
        except ValueError:
            raise TargetError("poison_bits", f"{poison_bits!r} is not hexadecimal") from None
        if not 0 <= bits < 1 << 32:
            raise TargetError("poison_bits", f"{poison_bits!r} is not 32 bits")
        s.poison_bits = poison_bits
        s.poison = np.array([bits], dtype=np.uint32).view(np.float32)[0]
        s._parse_conv(setup.get("conv"))
        return s

    def _parse_conv(self, conv) -> None:
        """setup.conv (protocol 1.5): absent, or exactly kernel_size, activation, bias, state_dtype, seed."""
        self.conv = conv
        if conv is None:
            return
        f = "setup.conv"
        if not isinstance(conv, dict):
            raise TargetError(f, "must be an object")
        keys = {"kernel_size", "activation", "bias", "state_dtype", "seed"}
        for k in sorted(set(conv) ^ keys):
            raise TargetError(f"{f}.{k}", "is missing" if k in keys else "is not a conv setup key")
        self.W = conv["kernel_size"]
        if type(self.W) is not int or not 2 <= self.W <= 8:
            raise TargetError(f + ".kernel_size", f"must be an integer in [2, 8], got {self.W!r}")
        if conv["activation"] not in ("silu", "none"):
            raise TargetError(f + ".activation", f"must be 'silu' or 'none', got {conv['activation']!r}")
        if type(conv["bias"]) is not bool:
            raise TargetError(f + ".bias", f"must be true or false, got {conv['bias']!r}")
        if conv["state_dtype"] not in DTYPES:
            raise TargetError(f + ".state_dtype", f"must be F32 or BF16, got {conv['state_dtype']!r}")
        self.conv_state = conv["state_dtype"]
        self.C = 2 * self.H * self.K + self.HV * self.V
        self.conv_stride = self.C * (self.W - 1) + 4

    def conv_params(self, frame) -> list:
        """Per layer {"weight": [C, W], "bias": [C] or None} from the setup's conv_weight.{l} / conv_bias.{l}."""
        out = []
        for l in range(self.L):
            w = _tensor(frame, f"conv_weight.{l}", "F32", (self.C, self.W))
            b = _tensor(frame, f"conv_bias.{l}", "F32", (self.C,)) if self.conv["bias"] else None
            if not self.conv["bias"] and f"conv_bias.{l}" in frame.tensors:
                raise TargetError(f"conv_bias.{l}", "is sent but setup.conv.bias is false")
            out.append({"weight": w, "bias": b})
        return out

    def conv_inputs(self, frame, l: int, n: int) -> np.ndarray:
        return _tensor(frame, f"x.{l}", self.act, (n, self.C))

    def index_rows(self, rows: list) -> Rows:
        """rows as a Rows whose index arrays are column views of this case's persistent index table
        (RowIndex): the first len(rows) rows of the table are rewritten, the rest keep what earlier batches
        left there. The table holds num_slots + 8 rows (a step's capacity) and grows for a larger batch."""
        n = len(rows)
        table = getattr(self, "index_table", None)
        if table is None or table.shape[0] < n:
            grown = np.full((max(n, self.S + 8), len(INDEX_FIELDS)), -1, dtype=np.int32)
            if table is not None:
                grown[: table.shape[0]] = table
            self.index_table = table = grown
        for i, r in enumerate(rows):
            table[i] = (r.slot, r.write_slot, r.T, r.token_offset, r.accepted, int(r.is_pad))
        out = Rows(rows)
        out.index = RowIndex(table, n)
        return out

    @property
    def state_shape(self) -> tuple:
        return (self.HV, self.K, self.V) if self.layout == "kv" else (self.HV, self.V, self.K)

    def setup_for_target(self) -> dict:
        d = dict(self.setup)
        d["poison_bits"], d["poison"] = self.poison_bits, self.poison
        return d

    def layer_params(self, frame, l: int) -> tuple:
        return (_tensor(frame, f"A_log.{l}", "F32", (self.HV,)),
                _tensor(frame, f"dt_bias.{l}", "F32", (self.HV, self.a_width)))

    def layer_inputs(self, frame, l: int, n: int) -> dict:
        shapes = {"q": (n, self.H, self.K), "k": (n, self.H, self.K), "v": (n, self.HV, self.V),
                  "a": (n, self.HV, self.a_width), "b": (n, self.HV)}
        return {name: _tensor(frame, f"{name}.{l}", self.act, shape) for name, shape in shapes.items()}
