"""An engine-protocol implementation that misbehaves on purpose, for the engine-level judge's failure modes.

Standard library only. Usage: misbehaving_engine.py MODE, MODE one of wrong_protocol, wrong_version,
error_on_admit, crash_on_admit, short_output_on_step, bad_status, and of version 0.2 (prefix snapshots and
migration): snapshots_at_0_1 (claims prefix_snapshots while answering 0.1), snapshots_not_bool,
negative_snapshot_tokens, snapshot_state_missing, snapshot_state_wrong_shape, snapshot_state_unasked,
hang_on_migrate, crash_on_snapshot_hit, older (answers 0.1 and claims nothing). Everything it is not told to
break it answers minimally (a step processes the whole window of every entry and outputs zeros; a snapshot is
at 2 tokens and all zeros).
"""
import json
import struct
import sys
import time

MODE = sys.argv[1]
IN, OUT = sys.stdin.buffer, sys.stdout.buffer


def read_frame():
    head = IN.read(8)
    if len(head) < 8:
        sys.exit(0)
    (n,) = struct.unpack("<Q", head)
    body = IN.read(n)
    (hn,) = struct.unpack("<Q", body[:8])
    header = json.loads(body[8:8 + hn])
    return json.loads(header["__metadata__"]["msg"])


def write_frame(msg, tensors=()):
    header = {"__metadata__": {"msg": json.dumps(msg)}}
    data, off = b"", 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        data += raw
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    body = struct.pack("<Q", len(h)) + h + data
    OUT.write(struct.pack("<Q", len(body)) + body)
    OUT.flush()


msg = read_frame()
protocol = "replayssm.target" if MODE == "wrong_protocol" else "replayssm.engine"
version = [9, 0] if MODE == "wrong_version" else [0, 1] if MODE in ("older", "snapshots_at_0_1") else [0, 2]
caps = {"name": "misbehaving-" + MODE}
if MODE != "older":
    caps.update(prefix_snapshots="yes" if MODE == "snapshots_not_bool" else True, migrates=True)
write_frame({"ok": True, "protocol": protocol, "version": version, "capabilities": caps})
config, reqs = None, {}
while True:
    msg = read_frame()
    op = msg["op"]
    if op == "shutdown":
        write_frame({"ok": True})
        sys.exit(0)
    if op == "setup":
        config = msg["setup"]["config"]
        write_frame({"ok": True})
    elif op == "admit":
        if MODE == "error_on_admit":
            write_frame({"ok": False, "error": {"field": "max_new", "message": "budgets above 1 are not supported"}})
            continue
        if MODE == "crash_on_admit":
            sys.stderr.write("engine: giving up on admit\n")
            sys.stderr.flush()
            sys.exit(5)
        reqs[msg["req"]] = msg["tokens"]
        write_frame({"ok": True})
    elif op == "step":
        tokens = [e["T"] for e in msg["entries"]]
        n = sum(tokens) - (1 if MODE == "short_output_on_step" else 0)
        hv, v = config["HV"], config["V"]
        layers = config["num_layers"]
        write_frame({"ok": True, "tokens": tokens},
                    [(f"o.{l}", "F32", [n, hv, v], b"\0" * (4 * n * hv * v)) for l in range(layers)])
    elif op == "requests":
        status = "done" if MODE == "bad_status" else "running"
        write_frame({"ok": True, "requests": [{"req": r, "status": status, "committed": 0, "to_prefill": t,
                                               "generated": 0} for r, t in reqs.items()]})
    elif op == "snapshot_hit":
        if MODE == "crash_on_snapshot_hit":
            sys.stderr.write("engine: no snapshot to restore\n")
            sys.stderr.flush()
            sys.exit(6)
        reqs[msg["req"]] = msg["tokens"]
        write_frame({"ok": True})
    elif op == "snapshot":
        tokens = -1 if MODE == "negative_snapshot_tokens" else 2
        hv, k, v = config["HV"], config["K"], config["V"]
        shape = [hv, k, v] if config["layout"] == "kv" else [hv, v, k]
        if MODE == "snapshot_state_wrong_shape":
            shape[2] += 1
        width = 2 if config["state_dtype"] == "BF16" else 4
        state = [("state", config["state_dtype"], shape, b"\0" * (width * shape[0] * shape[1] * shape[2]))]
        if MODE == "snapshot_state_missing" or ("layer" not in msg and MODE != "snapshot_state_unasked"):
            state = []
        write_frame({"ok": True, "tokens": tokens}, state)
    elif op == "migrate":
        if MODE == "hang_on_migrate":
            time.sleep(3600)
        write_frame({"ok": True})
    else:
        write_frame({"ok": False, "error": {"field": "op", "message": f"{op} not served"}})
