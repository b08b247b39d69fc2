#!/usr/bin/env python3
"""One warm allocation's ZooKeeper requests, as the wire saw them (BENCHMARKS.md, "The floor of the warm allocation,
and a request trace").

    python3 bench/trace.py warm --worker BIN --connect HOST:PORT --path P --items N [--time-boundary 0.5]
        [--label L] [--strace-out FILE] [--json]

Runs the worker example (any commit's: nothing in it needs changing) under `strace -f -ttt`, recording every byte it
exchanged with ZooKeeper, and decodes the two streams into requests and replies (the jute framing: length, xid, op
code; a `multi`'s operations counted one by one). Prints, from the worker's first ALLOCATING line to its ACQUIRED
line: each request with its send time, reply time, op code and size, then a summary (requests by kind, operations,
round trips on the critical path). strace stops the worker at every system call, so the times are stretched; the
order, the batching and the count of requests are exact.

The path must be warm, as bench/ab.py's: run a worker over it once before (bench/ab.py warm does that).
"""
import argparse
import json
import os
import re
import struct
import sys
import tempfile

from ab import allocation  # bench/ab.py, beside this script: the same run of one member

OPS = {0: "notification", 1: "create", 2: "delete", 3: "exists", 4: "getData", 5: "setData", 8: "getChildren",
       9: "sync", 11: "ping", 12: "getChildren2", 13: "check", 14: "multi", 15: "create2", 19: "createContainer",
       21: "createTTL", 22: "multiRead", 101: "setWatches", 105: "setWatches2", 106: "addWatch", -10: "createSession",
       -11: "closeSession", 100: "auth"}

LINE = re.compile(r'^(\d+)\s+(\d+\.\d+)\s+(.*)$')
CALL = re.compile(r'^(read|write|recvfrom|sendto|readv|writev|recvmsg|sendmsg)\((\d+)<(TCP[v6]*):\[([^\]]*)\]>,\s*(.*)$')
RESUMED = re.compile(r'^<\.\.\. (\w+) resumed>(.*)$')
RESULT = re.compile(r'\)\s+=\s+(-?\d+)')
HEX = re.compile(r'"((?:\\x[0-9a-f]{2})*)"')


def hexbytes(text):
    """The bytes of every quoted `\\xNN` string in `text`, concatenated (writev: one per iovec)."""
    return b"".join(bytes.fromhex(m.group(1).replace("\\x", "")) for m in HEX.finditer(text))


def streams(strace_file, port):
    """[(time, direction, bytes)] of the worker's connection(s) to ZooKeeper's `port`, in order."""
    pending = {}  # pid -> (name, fd, socket, text) of an unfinished call
    out = []
    for raw in open(strace_file, errors="replace"):
        m = LINE.match(raw.rstrip("\n"))
        if not m:
            continue
        pid, ts, rest = m.group(1), float(m.group(2)), m.group(3)
        r = RESUMED.match(rest)
        if r:
            if pid not in pending:
                continue
            name, sock, head = pending.pop(pid)
            text = head + r.group(2)
        elif rest.endswith("<unfinished ...>"):
            c = CALL.match(rest)
            if c:
                pending[pid] = (c.group(1), c.group(4), rest[:-len("<unfinished ...>")])
            continue
        else:
            c = CALL.match(rest)
            if not c:
                continue
            name, sock, text = c.group(1), c.group(4), rest
        if not sock.endswith(":%d" % port):
            continue
        result = RESULT.search(text)
        if not result or int(result.group(1)) <= 0:
            continue
        n = int(result.group(1))
        data = hexbytes(text)
        direction = "out" if name in ("write", "sendto", "writev", "sendmsg") else "in"
        out.append((ts, direction, data[:n]))
    return out


class Reader:
    def __init__(self, data):
        self.data, self.at = data, 0

    def int(self):
        value = struct.unpack_from(">i", self.data, self.at)[0]
        self.at += 4
        return value

    def long(self):
        value = struct.unpack_from(">q", self.data, self.at)[0]
        self.at += 8
        return value

    def bool(self):
        self.at += 1
        return self.data[self.at - 1] != 0

    def buffer(self):
        n = self.int()
        if n > 0:
            self.at += n
            return self.data[self.at - n:self.at]
        return b""


def multi_ops(body):
    """The op codes inside a multi / multiRead request body."""
    r = Reader(body)
    codes = []
    while True:
        kind, done, _err = r.int(), r.bool(), r.int()
        if done or kind == -1:
            return codes
        codes.append(kind)
        r.buffer()  # path
        if kind in (1, 15, 19, 21):
            r.buffer()
            for _ in range(max(r.int(), 0)):
                r.int(), r.buffer(), r.buffer()
            r.int()
            if kind == 21:
                r.long()
        elif kind in (2, 13):
            r.int()
        elif kind == 5:
            r.buffer(), r.int()
        elif kind in (3, 4, 8, 12):
            r.bool()  # watch


def frames(chunks):
    """[(time of the chunk that completed it, payload)] of one direction; the first (the session's handshake) too."""
    buf, out = b"", []
    for ts, data in chunks:
        buf += data
        while len(buf) >= 4:
            n = struct.unpack_from(">i", buf)[0]
            if len(buf) < 4 + n:
                break
            out.append((ts, buf[4:4 + n]))
            buf = buf[4 + n:]
    return out


def decode(chunks):
    """Requests matched with their replies by xid: [{sent, answered, op, ops, bytes, reply_bytes}]."""
    sent = frames([(t, d) for t, direction, d in chunks if direction == "out"])
    got = frames([(t, d) for t, direction, d in chunks if direction == "in"])
    requests, by_xid = [], {}
    for ts, payload in sent[1:]:  # [0] is the ConnectRequest
        xid, op = struct.unpack_from(">ii", payload)
        entry = {"sent": ts, "xid": xid, "op": OPS.get(op, str(op)), "bytes": len(payload) + 4, "ops": 1,
                 "answered": None}
        if op in (14, 22):
            try:
                codes = multi_ops(payload[8:])
                entry["ops"] = len(codes)
                entry["op"] += "[%s]" % ",".join(sorted({OPS.get(c, str(c)) for c in codes}))
            except (struct.error, IndexError):
                entry["ops"] = None
        requests.append(entry)
        by_xid[xid] = entry
    for ts, payload in got[1:]:
        xid = struct.unpack_from(">i", payload)[0]
        entry = by_xid.get(xid)
        if entry is not None and xid > 0 and entry["answered"] is None:
            entry["answered"] = ts
            entry["reply_bytes"] = len(payload) + 4
    return requests


def warm(args):
    args.impl = "rust"
    out = args.strace_out or tempfile.mkstemp(prefix="trace-", suffix=".strace")[1]
    strace = ["strace", "-f", "-ttt", "-yy", "-xx", "-s", "16777216", "-o", out,
              "-e", "trace=read,write,readv,writev,recvfrom,sendto,recvmsg,sendmsg"]
    # The exit status is strace's (it is signalled too), not the worker's.
    allocating, acquired = allocation(args, prefix=strace, check_exit=False)
    port = int(args.connect.rsplit(":", 1)[1])
    requests = decode(streams(out, port))
    if not args.strace_out:
        os.unlink(out)
    # The allocation: from ALLOCATING + time_boundary (the debounce's end, when lock work may start) to ACQUIRED.
    start = allocating + args.time_boundary
    window = [r for r in requests if allocating <= r["sent"] <= acquired and r["op"] != "ping"]
    work = [r for r in window if r["sent"] >= start - 0.002]
    summary = {"label": args.label, "n": args.items, "allocating_to_acquired_ms": round((acquired - allocating) * 1e3, 1),
               "requests_after_debounce": len(work),
               "ops_after_debounce": sum(r["ops"] or 0 for r in work),
               "by_kind": {}}
    for r in work:
        kind = summary["by_kind"].setdefault(r["op"], {"requests": 0, "ops": 0})
        kind["requests"] += 1
        kind["ops"] += r["ops"] or 0
    if args.json:
        print(json.dumps(dict(summary, requests=[dict(r, sent=round((r["sent"] - allocating) * 1e3, 2),
                                                      answered=(round((r["answered"] - allocating) * 1e3, 2)
                                                                if r["answered"] else None)) for r in window])))
        return
    print("%s: %d items, ALLOCATING → ACQUIRED %.1f ms under strace (time_boundary %.0f ms)" % (
        args.label, args.items, (acquired - allocating) * 1e3, args.time_boundary * 1e3))
    print("%9s %9s %8s  %-40s %5s %8s" % ("sent ms", "reply ms", "rtt ms", "request", "ops", "bytes"))
    for r in window:
        print("%9.1f %9s %8s  %-40s %5s %8d" % (
            (r["sent"] - allocating) * 1e3,
            "%.1f" % ((r["answered"] - allocating) * 1e3) if r["answered"] else "-",
            "%.1f" % ((r["answered"] - r["sent"]) * 1e3) if r["answered"] else "-",
            r["op"], r["ops"] if r["ops"] is not None else "?", r["bytes"]))
    print("after the debounce: %d requests, %d operations: %s" % (
        summary["requests_after_debounce"], summary["ops_after_debounce"],
        ", ".join("%s %d (%d ops)" % (k, v["requests"], v["ops"]) for k, v in sorted(summary["by_kind"].items()))))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("warm")
    w.add_argument("--worker", required=True)
    w.add_argument("--connect", required=True)
    w.add_argument("--path", required=True)
    w.add_argument("--items", type=int, required=True)
    w.add_argument("--time-boundary", type=float, default=0.5)
    w.add_argument("--label", default="worker")
    w.add_argument("--strace-out")
    w.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.command == "warm":
        warm(args)


if __name__ == "__main__":
    sys.exit(main())
