#!/usr/bin/env python3
"""The kazoo side of the benchmark (see BENCHMARKS.md): kazoo 2.11's SetPartitioner, doing what
benches/partitioner.rs and `zkp worker` (crates/cli/src/worker.rs) do for this crate, printing the same JSON.

    python3 bench/kazoo_bench.py single --connect HOST:PORT --path /p --items N [--time-boundary SECS]
        [--mode fresh|reused] [--run I]
    python3 bench/kazoo_bench.py worker --connect HOST:PORT --path /p --items-file FILE [--int-items]
        --identifier ID [--time-boundary SECS] [--max-reaction-time SECS] [--session-timeout SECS] [--json]

single: one member, on a session connected beforehand, partitions the integers 0..N-1 under --path. Measures the
time from constructing the SetPartitioner to ACQUIRED (raw_s; net_s = raw_s - time boundary), the requests ZooKeeper
received meanwhile (mntr before/after) and the process's peak RSS (VmHWM) once connected and once holding the items.
The session is then closed, which deletes the lock nodes server-side (kazoo's finish() would delete them one by one,
which takes about as long as acquiring them; it is not part of any figure).

worker: `zkp worker`'s command line and JSON lines (ts, state, member, generation, items), for the
multi-process scenarios of bench/multi.py. Unlike tests/kazoo/kazoo_worker.py, which polls the state every 20 ms,
it timestamps each transition when kazoo makes it (by wrapping SetPartitioner._set_state), so kazoo is not charged
for a polling delay of the harness. The first line (ALLOCATING, generation 0) is printed once the member has joined.
"""
import argparse
import json
import os
import socket
import sys
import threading
import time

from kazoo.client import KazooClient

MNTR_PACKETS = 1  # the mntr command itself is one packet the server counts


def four_letter(endpoint, command):
    """The answer of ZooKeeper's four-letter-word `command` (mntr, srvr, srst...) at HOST:PORT, as text."""
    host, port = endpoint.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(command.encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return data.decode(errors="replace")


def mntr(endpoint):
    data = four_letter(endpoint, "mntr")
    counters = dict(line.split("\t", 1) for line in data.splitlines() if "\t" in line)
    if "zk_packets_received" not in counters:
        raise SystemExit("mntr: unexpected answer (is mntr whitelisted?): %r" % data[:200])
    return counters


def delta(before, after, key):
    try:
        return int(after[key]) - int(before[key])
    except (KeyError, ValueError):
        return -1


def vm_hwm_kb():
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def single(args):
    client = KazooClient(hosts=args.connect, timeout=10)
    client.start(timeout=30)
    rss_idle_kb = vm_hwm_kb()
    items = list(range(args.items))

    before = mntr(args.connect)
    start = time.perf_counter()
    partitioner = client.SetPartitioner(
        path=args.path, set=items, identifier="bench-kazoo", time_boundary=args.time_boundary
    )
    partitioner.wait_for_acquire(timeout=3600)
    raw = time.perf_counter() - start
    after = mntr(args.connect)
    rss_peak_kb = vm_hwm_kb()
    held = len(list(partitioner)) if partitioner.acquired else 0
    if not partitioner.acquired or held != args.items:
        raise SystemExit("ended in %s holding %d of %d items" % (partitioner.state, held, args.items))
    client.stop()
    client.close()

    print(json.dumps({
        "impl": "kazoo",
        "scenario": "single",
        "mode": args.mode,
        "n": args.items,
        "run": args.run,
        "tb_s": args.time_boundary,
        "raw_s": round(raw, 6),
        "net_s": round(raw - args.time_boundary, 6),
        "requests": delta(before, after, "zk_packets_received") - MNTR_PACKETS,
        "writes": delta(before, after, "zk_cnt_updatelatency"),
        "reads": delta(before, after, "zk_cnt_readlatency"),
        "rss_idle_kb": rss_idle_kb,
        "rss_peak_kb": rss_peak_kb,
    }), flush=True)


def worker(args):
    with open(args.items_file) as f:
        raw = [line.strip() for line in f if line.strip()]
    items = [int(x) for x in raw] if args.int_items else raw
    client = KazooClient(hosts=args.connect, timeout=args.session_timeout)
    # Every connection state change on stderr (kept with KEEP_LOGS): a SUSPENDED partitioner releases everything.
    client.add_listener(lambda state: print("%.3f connection %s" % (time.time(), state), file=sys.stderr, flush=True))
    client.start(timeout=30)
    stopping = threading.Event()
    changed = threading.Event()
    out = threading.Lock()
    import signal

    signal.signal(signal.SIGTERM, lambda *_: (stopping.set(), changed.set()))
    signal.signal(signal.SIGINT, lambda *_: (stopping.set(), changed.set()))

    partitioner = client.SetPartitioner(
        path=args.path,
        set=items,
        identifier=args.identifier,
        time_boundary=args.time_boundary,
        max_reaction_time=args.max_reaction_time,
    )
    generation = [0]

    def emit(state):
        record = {
            "ts": time.time(),
            "state": state,
            "member": args.identifier,
            "generation": generation[0],
            "items": list(partitioner._partition_set) if state == "ACQUIRED" else [],
        }
        with out:
            print(json.dumps(record) if args.json else "%.3f %s %s" % (record["ts"], state, record["items"]),
                  flush=True)

    original_set_state = partitioner._set_state

    def set_state(state):  # called by kazoo (under its state lock) at every transition
        original_set_state(state)
        generation[0] += 1
        emit(state)
        changed.set()

    partitioner._set_state = set_state
    emit(partitioner.state)  # joined: ALLOCATING, generation 0

    while not stopping.is_set():
        changed.wait(0.5)
        changed.clear()
        if partitioner.failed:
            sys.exit(1)
        elif partitioner.release:
            partitioner.release_set()
    partitioner.finish()
    client.stop()
    client.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("single")
    s.add_argument("--connect", required=True)
    s.add_argument("--path", required=True)
    s.add_argument("--items", type=int, required=True)
    s.add_argument("--time-boundary", type=float, default=0.1)
    s.add_argument("--mode", default="fresh")
    s.add_argument("--run", type=int, default=0)
    w = sub.add_parser("worker")
    w.add_argument("--connect", required=True)
    w.add_argument("--path", required=True)
    w.add_argument("--items-file", required=True)
    w.add_argument("--int-items", action="store_true")
    w.add_argument("--identifier", default="%s-%d" % (socket.gethostname(), os.getpid()))
    w.add_argument("--time-boundary", type=float, default=30)
    w.add_argument("--max-reaction-time", type=float, default=1)
    w.add_argument("--session-timeout", type=float, default=10)
    w.add_argument("--json", action="store_true")
    args = parser.parse_args()
    single(args) if args.command == "single" else worker(args)


if __name__ == "__main__":
    main()
