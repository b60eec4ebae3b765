"""A target-protocol implementation that misbehaves on purpose, for the judge's failure-mode tests.

Standard library only (no NumPy): frames are written by hand. Usage: misbehaving_target.py MODE, with MODE
one of exit_at_start, crash_on_setup, hang_on_setup, garbage_on_setup, huge_frame_on_setup,
stderr_flood_on_setup (then behaves), error_on_setup, wrong_version, wrong_shape_on_step, wrong_dtype_on_step,
stderr_then_exit, hang_at_hello (never answers hello), slow_hello SECONDS (answers hello after SECONDS, then
behaves), and for the `fixture` command (the target claims fixture op "recurrent"): fixture_zeros
(zeros of every expected dtype and shape), fixture_wrong_shape, fixture_wrong_dtype, fixture_missing,
fixture_extra, fixture_echo_pool (claims mtp_batch too and answers its input pool unchanged: a commit
that writes nothing), fixture_pad_ones (the same, claiming pad_outputs_zero, with every output 1.0, PAD rows'
included), fixture_v10 (answers protocol version 1.0, which has no fixture command, yet claims the op),
fixture_fatal_once MARKER (the first process to get a `fixture` command creates MARKER, answers an error
marked fatal, as a sticky device fault is, and exits with status 3; later processes behave as fixture_zeros).
The conv fixture ops (protocol 1.3; these modes claim conv.update and conv.commit with act_dtypes ["BF16"]):
fixture_conv_echo (answers every state tensor with the input state, zeros elsewhere: a commit that keeps the
checkpoint, right exactly when n = 0), fixture_conv_missing (leaves out the last expected tensor), and
fixture_conv_v12 (the same claim under protocol version 1.2, which has no conv ops).
The hello answer is always well formed except in exit_at_start and wrong_version.
"""
import json
import os
import signal
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
    msg = json.loads(header["__metadata__"]["msg"])
    msg["_tensors"] = {k: body[8 + hn + v["data_offsets"][0]:8 + hn + v["data_offsets"][1]]
                       for k, v in header.items() if k != "__metadata__"}  # raw bytes of each tensor
    return msg


def write_frame(msg, tensors=()):
    """tensors: (name, dtype, shape, raw bytes)."""
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


if MODE == "exit_at_start":
    sys.exit(3)
if MODE == "stderr_then_exit":
    sys.stderr.write("adapter: cannot import the peer kernel (a message the report must show)\n")
    sys.stderr.flush()
    sys.exit(4)

msg = read_frame()
assert msg["op"] == "hello"
if MODE == "hang_at_hello":  # never answers hello: given up at the start-up budget
    time.sleep(3600)
if MODE == "slow_hello":  # answers hello after SECONDS (argv[2]), as a target importing torch may, then behaves
    time.sleep(float(sys.argv[2]))
CONV = MODE.startswith("fixture_conv_")
version = ([2, 0] if MODE == "wrong_version" else [1, 0] if MODE == "fixture_v10" else
           [1, 2] if MODE == "fixture_conv_v12" else [1, 3] if CONV else [1, 1])
caps = {"name": "misbehaving-" + MODE, "copy_slot": False}
if CONV:
    caps["fixture_ops"] = ["conv.update", "conv.commit"]
    caps["act_dtypes"] = ["BF16"]
elif MODE.startswith("fixture_"):
    caps["fixture_ops"] = ["recurrent", "mtp_batch"] if MODE in ("fixture_echo_pool", "fixture_pad_ones") else ["recurrent"]
    caps["pad_outputs_zero"] = MODE == "fixture_pad_ones"
write_frame({"ok": True, "protocol": "replayssm.target", "version": version, "capabilities": caps})
SIZE = {"F32": 4, "BF16": 2, "F64": 8}

while True:
    msg = read_frame()
    op = msg["op"]
    if op == "shutdown":
        write_frame({"ok": True})
        if MODE == "slow_exit_marker":  # writes at exit, as a sanitizer's summary would: the judge must wait for it
            import time
            time.sleep(0.3)
            with open(sys.argv[2], "w") as f:
                f.write("exited after shutdown\n")
        sys.exit(0)
    if op == "setup":
        if MODE == "crash_on_setup":
            sys.stderr.write("adapter: about to crash\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGSEGV)
        if MODE == "hang_on_setup":
            time.sleep(3600)
        if MODE == "garbage_on_setup":
            OUT.write(struct.pack("<Q", 16) + b"not a container!")
            OUT.flush()
            continue
        if MODE == "huge_frame_on_setup":  # declares 1 TiB: refused before anything is allocated
            OUT.write(struct.pack("<Q", 1 << 40))
            OUT.flush()
            time.sleep(3600)
        if MODE == "stderr_flood_on_setup":  # 1 MiB of logging must not block the answer
            for _ in range(1024):
                sys.stderr.write("x" * 1023 + "\n")
            sys.stderr.flush()
        if MODE == "error_on_setup":
            write_frame({"ok": False, "error": {"field": "setup.config.K", "message": "K = 8 is not supported"}})
            continue
        setup = msg["setup"]
        write_frame({"ok": True})
        continue
    if op == "fixture":
        if MODE == "fixture_fatal_once" and not os.path.exists(sys.argv[2]):
            # the first process answers a sticky device fault and exits; later processes answer zeros
            open(sys.argv[2], "w").close()
            write_frame({"ok": False, "error": {"field": "", "fatal": True,
                                                "message": "RuntimeError: Triton Error [CUDA]: misaligned address"}})
            sys.exit(3)
        outs = sorted(msg["outputs"].items())  # name -> {"dtype", "shape"}
        tensors = []
        for i, (name, spec) in enumerate(outs):
            dtype, shape = spec["dtype"], list(spec["shape"])
            if MODE in ("fixture_missing", "fixture_conv_missing") and i == len(outs) - 1:
                continue
            if MODE == "fixture_wrong_shape" and i == 0:
                shape[0] += 1
            if MODE == "fixture_wrong_dtype" and i == 0:
                dtype = "F64"
            count = 1
            for d in shape:
                count *= d
            raw = b"\0" * (SIZE[dtype] * count)
            if MODE == "fixture_conv_echo" and name == "out.state":
                raw = msg["_tensors"]["in.state"]
            if MODE == "fixture_conv_echo" and name == "out.states":  # every draft token's state: the input's
                raw = msg["_tensors"]["in.state"] * shape[0]
            if MODE in ("fixture_echo_pool", "fixture_pad_ones") and name == "out.pool":
                raw = msg["_tensors"]["in.pool"]
            if MODE == "fixture_pad_ones" and name == "out.o":
                raw = struct.pack("<f", 1.0) * count
            tensors.append((name, dtype, shape, raw))
        if MODE == "fixture_extra":
            tensors.append(("out.bonus", "F32", [1], b"\0" * 4))
        write_frame({"ok": True}, tensors)
        continue
    if op == "pool":  # nothing ever changes: the digests the judge knows, no slot values
        write_frame({"ok": True, "digests": msg["known"], "slots": []})
        continue
    if op == "step":
        cfg = setup["config"]
        n, hv, v = msg["total_tokens"], cfg["HV"], cfg["V"]
        act = cfg["act_dtype"]
        size = 2 if act == "BF16" else 4
        if MODE == "wrong_shape_on_step":
            write_frame({"ok": True}, [("o.0", act, [n + 1, hv, v], b"\0" * (size * (n + 1) * hv * v))])
        else:
            write_frame({"ok": True}, [("o.0", "F64", [n, hv, v], b"\0" * (8 * n * hv * v))])
        continue
    write_frame({"ok": True})
