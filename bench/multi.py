#!/usr/bin/env python3
"""Multi-process scenarios of the benchmark (see BENCHMARKS.md), for either implementation: members are separate
processes (this crate's `zkp worker`, or kazoo through bench/kazoo_bench.py worker), timed from the JSON lines
they print on every state change. One run per invocation, one JSON line per measurement on stdout.

    python3 bench/multi.py group --impl rust|kazoo --connect HOST:PORT [--bench-bin BIN] [--rust-worker BIN] [--run I]
        [--items 1000] [--time-boundary 0.5] [--label L]
    python3 bench/multi.py react --impl rust|kazoo --connect HOST:PORT [--bench-bin BIN] [--rust-worker BIN] [--run I]
        [--items 1000] [--cycles 10] [--time-boundary 0.1] [--label L]

(BIN: the Rust bench binary, used to delete the path afterwards (without it, kazoo deletes it); the worker example,
the command that runs one member, default "target/release/zkp worker"; L: added to every JSON line.)

group: 4 members start together on a fresh path ("start4": from the last member's join to all 4 ACQUIRED with a
disjoint cover of the items), then a 5th joins ("join5": from its join to all 5 ACQUIRED again, disjoint cover). The
requests ZooKeeper received during each phase come from mntr (minus mntr's own packet).

react: one member A partitions N items while this script holds the lock of the last item (a kazoo-style contender,
created first), so A takes every other lock and then waits behind ours: it is mid-allocation, and stays so. Each
cycle: (1) "abort": this script adds a member node to the party; measured is the time from that node's creation
(its ctime, stamped by the server) until the first of A's lock nodes is deleted (A gave up the allocation), seen
through exists-watches on all of them. Neither implementation publishes RELEASE here: kazoo restarts allocation
internally, and only when its lock wait times out (every max_reaction_time = 1 s) or after its next lock; this crate
restarts it when the party watch fires. The deletion is what a peer can observe. With the extra member, A's share
(items 0, 2, 4, ...) no longer includes the blocked item, so A reaches ACQUIRED. (2) "release": a second member node
is added; measured is the time from its ctime until A reports RELEASE (A's own timestamp, same clock). A releases
and allocates items 0, 3, 6, ..., blocking behind our lock again. Then both extra nodes are deleted in one
transaction (not measured): A gives up, and allocates everything again: the next cycle.
"""
import argparse
import json
import os
import queue
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kazoo_bench import MNTR_PACKETS, delta, mntr  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


class Members:
    """Worker processes of one implementation and their JSON lines, merged into one queue."""

    def __init__(self, args, path, items_file, log_dir):
        self.args, self.path, self.items_file, self.log_dir = args, path, items_file, log_dir
        self.procs = []
        self.events = queue.Queue()
        self.records = []  # per member: list of records

    def command(self, identifier, time_boundary):
        common = ["--connect", self.args.connect, "--path", self.path, "--items-file", self.items_file,
                  "--int-items", "--identifier", identifier, "--time-boundary", str(time_boundary),
                  "--max-reaction-time", "1", "--session-timeout", "10", "--json"]
        if self.args.impl == "rust":
            return shlex.split(self.args.rust_worker) + common
        return [sys.executable, os.path.join(HERE, "kazoo_bench.py"), "worker"] + common

    def spawn(self, identifier, time_boundary):
        index = len(self.procs)
        log = open(os.path.join(self.log_dir, "%s-%s.stderr" % (os.path.basename(self.path), identifier)), "w")
        proc = subprocess.Popen(self.command(identifier, time_boundary), stdout=subprocess.PIPE, stderr=log,
                                text=True, bufsize=1)
        self.procs.append(proc)
        self.records.append([])

        def pump():
            for line in proc.stdout:
                line = line.strip()
                if line.startswith("{"):
                    self.events.put((index, json.loads(line)))
            self.events.put((index, None))

        threading.Thread(target=pump, daemon=True).start()
        return index

    def next_event(self, deadline):
        """The next record (member index, record), or None at the deadline. A member's exit is an error."""
        timeout = deadline - time.time()
        if timeout <= 0:
            return None
        try:
            index, record = self.events.get(timeout=timeout)
        except queue.Empty:
            return None
        if record is None:
            raise SystemExit("member %d exited with %s (see %s)" % (index, self.procs[index].wait(), self.log_dir))
        self.records[index].append(record)
        return index, record

    def wait_for(self, condition, timeout, what):
        deadline = time.time() + timeout
        while True:
            result = condition()
            if result:
                return result
            if self.next_event(deadline) is None:
                latest = [(r[-1]["state"], r[-1]["generation"]) if r else None for r in self.records]
                raise SystemExit("timed out after %.0f s waiting for %s; latest states %s" % (timeout, what, latest))

    def stop(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


LABEL = None


def emit(record):
    if LABEL is not None:
        record = dict(record, label=LABEL)
    print(json.dumps(record), flush=True)


def delete_tree(args, path):
    if args.bench_bin:
        subprocess.run([args.bench_bin, "delete-tree", "--connect", args.connect, "--path", path], check=False)
        return
    # Without the bench binary (bench/ab.sh): kazoo's recursive delete, slower but the same.
    client = KazooClient(hosts=args.connect, timeout=10)
    client.start(timeout=30)
    try:
        client.delete(path, recursive=True)
    except NoNodeError:
        pass
    finally:
        client.stop()
        client.close()


def write_items(n):
    fd, name = tempfile.mkstemp(prefix="bench-items-", suffix=".txt")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(str(i) for i in range(n)) + "\n")
    return name


def group(args):
    n, tb = args.items, args.time_boundary
    path = "/bench/group-%s-%d-%s" % (args.impl, args.run, uuid.uuid4().hex[:8])
    items_file = write_items(n)
    members = Members(args, path, items_file, args.log_dir)
    every_item = set(range(n))

    def covered(count, since_generation=None):
        """(t1, latest records) once the first `count` members are all ACQUIRED with a disjoint cover, each (if given)
        past the generation it had when the phase began."""
        if len(members.records) < count or any(not members.records[i] for i in range(count)):
            return None
        latest = [members.records[i][-1] for i in range(count)]
        if any(r["state"] != "ACQUIRED" for r in latest):
            return None
        if since_generation and any(r["generation"] <= g for r, g in zip(latest, since_generation)):
            return None
        held = [set(r["items"]) for r in latest]
        if sum(len(h) for h in held) != n or set().union(*held) != every_item:
            return None
        return max(r["ts"] for r in latest), latest

    try:
        before = mntr(args.connect)
        for i in range(4):
            members.spawn("w%d" % i, tb)
        t1, latest = members.wait_for(lambda: covered(4), 600, "4 members ACQUIRED")
        after = mntr(args.connect)
        joins = [members.records[i][0]["ts"] for i in range(4)]
        raw = t1 - max(joins)
        emit({"impl": args.impl, "scenario": "start4", "n": n, "run": args.run, "tb_s": tb, "raw_s": round(raw, 6),
              "net_s": round(raw - tb, 6), "join_spread_s": round(max(joins) - min(joins), 6),
              "requests": delta(before, after, "zk_packets_received") - MNTR_PACKETS,
              "writes": delta(before, after, "zk_cnt_updatelatency"),
              "reads": delta(before, after, "zk_cnt_readlatency")})

        generations = [r["generation"] for r in latest]
        before = mntr(args.connect)
        fifth = members.spawn("w4", tb)
        t1, _ = members.wait_for(lambda: covered(5, generations + [-1]), 600, "5 members ACQUIRED")
        after = mntr(args.connect)
        raw = t1 - members.records[fifth][0]["ts"]
        emit({"impl": args.impl, "scenario": "join5", "n": n, "run": args.run, "tb_s": tb, "raw_s": round(raw, 6),
              "net_s": round(raw - tb, 6),
              "requests": delta(before, after, "zk_packets_received") - MNTR_PACKETS,
              "writes": delta(before, after, "zk_cnt_updatelatency"),
              "reads": delta(before, after, "zk_cnt_readlatency")})
    finally:
        members.stop()
        os.unlink(items_file)
        delete_tree(args, path)


def react(args):
    n, tb = args.items, args.time_boundary
    path = "/bench/react-%s-%d-%s" % (args.impl, args.run, uuid.uuid4().hex[:8])
    items_file = write_items(n)
    observer = KazooClient(hosts=args.connect, timeout=10)
    observer.start(timeout=30)
    observer.ensure_path(path + "/party")
    blocked_dir = "%s/locks/%d" % (path, n - 1)
    observer.ensure_path(blocked_dir)
    blocker_prefix = "b" * 32
    observer.create(blocked_dir + "/" + blocker_prefix + "__lock__", ephemeral=True, sequence=True)
    # Extra member nodes (kazoo's party node format), named to sort after A ("a" for kazoo, "a-<seq>" for this
    # crate), so A is member 0: with one extra member A owns items 0, 2, 4, ... (not the blocked last one, n - 1 odd);
    # with two, items 0, 3, 6, ... (the blocked one again, n - 1 being a multiple of 3).
    assert (n - 1) % 2 == 1 and (n - 1) % 3 == 0, "--items must be 1 more than an odd multiple of 3 (e.g. 1000)"
    gates = ["%s/party/%s-zz-gate%d" % (path, uuid.uuid4().hex, i) for i in (1, 2)]
    members = Members(args, path, items_file, args.log_dir)
    a = members.spawn("a", tb)

    def latest():
        return members.records[a][-1] if members.records[a] else None

    def a_nodes():
        """A's contender in each of the directories 0..n-2, or None while one is missing."""
        results = [observer.get_children_async("%s/locks/%d" % (path, i)) for i in range(n - 1)]
        nodes = []
        for i, result in enumerate(results):
            try:
                mine = [c for c in result.get() if not c.startswith(blocker_prefix)]
            except NoNodeError:
                return None
            if len(mine) != 1:
                return None
            nodes.append("%s/locks/%d/%s" % (path, i, mine[0]))
        return nodes

    def add_member(node):
        """Adds a party node; returns its creation time on the server (ms resolution, the host's clock) and the
        round trip of the create (how busy the server was)."""
        sent = time.time()
        _, stat = observer.create(node, ephemeral=True, include_data=True)
        return stat.ctime / 1000.0, time.time() - sent

    try:
        for cycle in range(args.cycles):
            # Wait until A, alone in the party, has a contender in every directory: it is blocked behind our lock.
            deadline = time.time() + 600
            while True:
                while members.next_event(time.time() + 0.05) is not None:
                    pass
                if time.time() > deadline:
                    raise SystemExit("A never blocked behind our lock (latest %s)" % latest())
                record = latest()
                if record is None or record["state"] != "ALLOCATING":
                    continue
                last = "%s/locks/%d" % (path, n - 2)
                if not observer.exists(last) or not observer.get_children(last):
                    continue
                nodes = a_nodes()
                if nodes is not None:
                    break
            deleted = threading.Event()
            first = []

            def gone(event, first=first, deleted=deleted):
                if not first:
                    first.append(time.time())
                deleted.set()

            watched = [observer.exists_async(node, watch=gone) for node in nodes]
            if any(w.get() is None for w in watched):
                raise SystemExit("one of A's lock nodes vanished before the party changed")
            time.sleep(random.uniform(0.2, 0.7))

            # (1) Party change while A is mid-allocation: how long until A gives up (deletes a lock node)?
            changed, rtt = add_member(gates[0])
            if not deleted.wait(30):
                raise SystemExit("A did not give up its allocation within 30 s of the party change")
            emit({"impl": args.impl, "scenario": "abort", "n": n, "run": args.run, "cycle": cycle,
                  "latency_s": round(first[0] - changed, 6), "create_rtt_s": round(rtt, 6)})
            members.wait_for(lambda: (latest() or {}).get("state") == "ACQUIRED" and latest()["ts"] > changed,
                             600, "A ACQUIRED with one extra member")
            time.sleep(random.uniform(0.2, 0.7))

            # (2) Party change while A is ACQUIRED: how long until A reports RELEASE?
            changed, rtt = add_member(gates[1])
            record = members.wait_for(
                lambda: next((r for r in members.records[a] if r["ts"] > changed and r["state"] == "RELEASE"), None),
                30, "A RELEASE after a second extra member joined")
            emit({"impl": args.impl, "scenario": "release", "n": n, "run": args.run, "cycle": cycle,
                  "latency_s": round(record["ts"] - changed, 6), "create_rtt_s": round(rtt, 6)})

            # Back to A alone (not measured): both extra members leave at once.
            transaction = observer.transaction()
            for gate in gates:
                transaction.delete(gate)
            transaction.commit()
    finally:
        members.stop()
        observer.stop()
        observer.close()
        os.unlink(items_file)
        delete_tree(args, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", choices=["group", "react"])
    parser.add_argument("--impl", choices=["rust", "kazoo"], required=True)
    parser.add_argument("--connect", required=True)
    parser.add_argument("--run", type=int, default=0)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--time-boundary", type=float, default=None)
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--rust-worker", default="target/release/zkp worker")
    parser.add_argument("--bench-bin", help="the Rust bench binary (for delete-tree; without it, kazoo deletes)")
    parser.add_argument("--label", help="added to every JSON line (bench/ab.sh: which commit ran)")
    parser.add_argument("--log-dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    global LABEL
    LABEL = args.label
    if args.time_boundary is None:
        args.time_boundary = 0.5 if args.scenario == "group" else 0.1
    group(args) if args.scenario == "group" else react(args)


if __name__ == "__main__":
    main()
