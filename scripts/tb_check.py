#!/usr/bin/python3
"""tb_check.py: print the scalars of TensorBoard event files as `tag step value` lines.

For users without TensorBoard, and as an independent check of ztrain's writer: every record's
length and data CRC32C are verified, and the Event protobuf is decoded by hand (standard
library only). Reads scalars stored as simple_value (what ztrain and PyTorch write) and as
float/double tensors (what TensorFlow 2 writes); other summaries are skipped.

  scripts/tb_check.py OUTPUT_DIR/runs            # every events.out.tfevents.* file below it
  scripts/tb_check.py FILE --tag train/loss      # only tags starting with train/loss

Exit status: 0 when every record checks out (a cut-off last record, as a crash leaves, only
warns); 1 on a CRC mismatch or a damaged record; 2 when no event file is found.
"""
import argparse
import os
import struct
import sys


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class Damaged(Exception):
    pass


def records(path):
    """Yields each record's data; raises Damaged on a bad CRC, warns on a cut-off tail."""
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0
    while pos < len(buf):
        if pos + 12 > len(buf):
            print(f"warning: {path}: last record cut off at byte {pos} (unflushed at a crash?)", file=sys.stderr)
            return
        header = buf[pos:pos + 8]
        (n,) = struct.unpack("<Q", header)
        (len_crc,) = struct.unpack("<I", buf[pos + 8:pos + 12])
        if len_crc != masked_crc(header):
            raise Damaged(f"{path}: length CRC mismatch at byte {pos}")
        if pos + 12 + n + 4 > len(buf):
            print(f"warning: {path}: last record cut off at byte {pos} (unflushed at a crash?)", file=sys.stderr)
            return
        data = buf[pos + 12:pos + 12 + n]
        (data_crc,) = struct.unpack("<I", buf[pos + 12 + n:pos + 16 + n])
        if data_crc != masked_crc(data):
            raise Damaged(f"{path}: data CRC mismatch in the record at byte {pos}")
        yield data
        pos += 16 + n


def _varint(buf, pos):
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise Damaged("bad varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def fields(buf):
    """Yields (field number, wire type, value) of one protobuf message."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise Damaged(f"unsupported wire type {wire}")
        if pos > len(buf):
            raise Damaged("field runs past the end of its message")
        yield num, wire, value


def _tensor_scalar(buf):
    """A scalar from a TensorProto (dtype 1 = float, 2 = double), or None."""
    dtype, content, vals = 0, b"", []
    for num, wire, v in fields(buf):
        if num == 1 and wire == 0:
            dtype = v
        elif num == 4 and wire == 2:
            content = v
        elif num in (5, 6):  # float_val / double_val, packed or not
            fmt, size = ("<f", 4) if num == 5 else ("<d", 8)
            vals += [struct.unpack(fmt, v[i:i + size])[0] for i in range(0, len(v) - size + 1, size)]
    if vals:
        return vals[0]
    if dtype == 1 and len(content) == 4:
        return struct.unpack("<f", content)[0]
    if dtype == 2 and len(content) == 8:
        return struct.unpack("<d", content)[0]
    return None


def scalars(event):
    """(file_version or None, [(tag, step, value)]) of one Event message."""
    step, version, out, summaries = 0, None, [], []
    for num, wire, v in fields(event):
        if num == 2 and wire == 0:
            step = v - (1 << 64) if v >= 1 << 63 else v
        elif num == 3 and wire == 2:
            version = v.decode("utf-8", "replace")
        elif num == 5 and wire == 2:
            summaries.append(v)
    for summary in summaries:
        for num, wire, value in fields(summary):
            if num != 1 or wire != 2:
                continue
            tag, x = "", None
            for vn, vw, vv in fields(value):
                if vn == 1 and vw == 2:
                    tag = vv.decode("utf-8", "replace")
                elif vn == 2 and vw == 5:
                    x = struct.unpack("<f", vv)[0]
                elif vn == 8 and vw == 2:
                    x = _tensor_scalar(vv)
            if x is not None:
                out.append((tag, step, x))
    return version, out


def event_files(paths):
    found = []
    for p in paths:
        if os.path.isdir(p):
            for root, _, names in os.walk(p):
                found += [os.path.join(root, n) for n in names if n.startswith("events.out.tfevents.")]
        elif os.path.exists(p):
            found.append(p)
        else:
            print(f"error: {p} does not exist", file=sys.stderr)
    return sorted(found)


def main():
    ap = argparse.ArgumentParser(description="Print TensorBoard scalars as `tag step value`, verifying CRCs.")
    ap.add_argument("paths", nargs="+", help="event files or folders to search")
    ap.add_argument("--tag", default="", help="only tags starting with this")
    args = ap.parse_args()
    files = event_files(args.paths)
    if not files:
        print("error: no events.out.tfevents.* file found", file=sys.stderr)
        return 2
    status = 0
    for path in files:
        if len(files) > 1:
            print(f"# {path}")
        try:
            for i, rec in enumerate(records(path)):
                version, rows = scalars(rec)
                if i == 0 and version is None:
                    print(f"warning: {path}: first event has no file_version", file=sys.stderr)
                for tag, step, value in rows:
                    if tag.startswith(args.tag):
                        print(f"{tag} {step} {value:.9g}")
        except Damaged as e:
            print(f"error: {e}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `| head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
