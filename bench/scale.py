#!/usr/bin/env python3
"""Scale benchmark: P members over N items, cold start, a join, a leave and a crash, with what each costs ZooKeeper
and the members.

    python3 bench/scale.py run --connect HOST:PORT --container NAME --zk-data DIR --zk-gc-log FILE
        [--rust-worker BIN] [--host-bin BIN] [--members 10] [--items 10000] [--runs 1]
        [--modes eager-stride,incremental-rendezvous] [--hostings processes,inprocess]
        [--time-boundary 2] [--session-timeout 10] [--log-dir DIR]    # one JSON line per phase on stdout
    python3 bench/scale.py report FILE.jsonl [--machine TEXT]            # the markdown section on stdout

`bash bench/scale.sh` runs both (it starts the ZooKeeper container, with its transaction log directory and GC log
on the host so that this script can read them).

Hostings: `processes` (every member is a `zkp worker` process, as in bench/rebalance.py, whose Party class this
script reuses) and `inprocess` (every member lives in one benches/scale.rs process, each with its own client and
ZooKeeper session; same JSON lines, routed by `id`).

Phases, on a fresh path per run: start (P members launched at once, until all are ACQUIRED with a disjoint cover of
the N items), join (a P+1-th member), leave (one member gets SIGTERM: finish(); in-process: `leave`), crash (another
member gets SIGKILL; in-process: its connection is cut and its loop aborted, without finish(); its session lingers
until the session timeout). Each phase starts from a stable party and ends once the party is stable again and no
member has printed anything for --quiet seconds. The definitions of every figure are in DEFINITIONS below (they are
printed in the report).
"""
import argparse
import glob
import json
import os
import re
import signal
import statistics
import struct
import subprocess
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import handover  # noqa: E402  (orphan_figures: when a departed member's items were taken)
from kazoo_bench import four_letter, mntr  # noqa: E402
from rebalance import Party, PhaseError, fmt_num, fmt_s, new_party_node_ctime, summary  # noqa: E402

MODES = {
    "eager-stride": {"flags": ["--partition", "stride", "--rebalance", "eager"],
                     "label": "default (eager + stride)"},
    "incremental-rendezvous": {"flags": ["--partition", "rendezvous", "--rebalance", "incremental"],
                               "label": "low-movement (incremental + rendezvous)"},
    "incremental-rendezvous-session-aware": {
        "flags": ["--partition", "rendezvous", "--rebalance", "incremental", "--session-policy", "session-aware"],
        "label": "low-movement + session-aware"},
}
HOSTINGS = {"processes": "separate processes", "inprocess": "in one process"}
SCENARIOS = ["start", "join", "leave", "crash"]
CLK_TCK = os.sysconf("SC_CLK_TCK")


def say(message):
    print("[scale %s] %s" % (time.strftime("%H:%M:%S"), message), file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------ ZooKeeper's side


def last_zxid(endpoint):
    match = re.search(r"Zxid: (0x[0-9a-f]+)", four_letter(endpoint, "srvr"))
    if not match:
        raise PhaseError("srvr did not give the server's zxid")
    return int(match.group(1), 16)


class TxnLog:
    """Reads ZooKeeper's transaction log files (dataLogDir/version-2/log.*) as they grow, and counts what each
    committed transaction did to the nodes (creates, deletes, and the ephemerals a closed or expired session took
    with it: ZooKeeper 3.6+ writes their paths into the closeSession transaction)."""

    CREATES = (1, 15, 19, 21)  # create, create2, createContainer, createTTL: the path is the first field
    DELETE, MULTI, CLOSE_SESSION, CREATE_SESSION = 2, 14, -11, -10
    KINDS = {1: "create", 2: "delete", 5: "setData", 7: "setACL", 13: "check", 14: "multi", 15: "create2",
             16: "reconfig", 19: "createContainer", 20: "deleteContainer", 21: "createTTL", -1: "error",
             -10: "createSession", -11: "closeSession"}
    ERRORS = {0: "OK (rolled back with the multi)", -2: "RuntimeInconsistency", -101: "NoNode", -102: "NoAuth",
              -103: "BadVersion", -108: "NoChildrenForEphemerals", -110: "NodeExists", -111: "NotEmpty",
              -112: "SessionExpired"}

    def __init__(self, data_dir):
        self.dir = os.path.join(data_dir, "version-2")
        self.offsets = {}  # file -> offset of the next unread entry
        self.txns = []  # (zxid, time in ms, session id, [(op, path)])

    def poll(self):
        for path in sorted(glob.glob(os.path.join(self.dir, "log.*")), key=lambda p: int(p.rsplit(".", 1)[1], 16)):
            with open(path, "rb") as f:
                offset = self.offsets.get(path, 16)  # after the file header (magic, version, dbid)
                f.seek(offset)
                data = f.read()
            o = 0
            while o + 12 <= len(data):
                _crc, length = struct.unpack_from(">qi", data, o)
                if length <= 0 or o + 12 + length + 1 > len(data):
                    break  # the preallocated zeros after the last entry, or an entry being written
                body = data[o + 12:o + 12 + length]
                client, _cxid, zxid, stamp, kind = struct.unpack_from(">qiqqi", body, 0)
                ops = [("kind", kind)]
                self._record(kind, body, 32, ops)
                self.txns.append((zxid, stamp, client, ops))
                o += 12 + length + 1
            self.offsets[path] = offset + o

    @staticmethod
    def _string(body, o):
        (n,) = struct.unpack_from(">i", body, o)
        o += 4
        return (body[o:o + n].decode("utf-8", "replace") if n >= 0 else None), o + max(n, 0)

    def _record(self, kind, body, o, ops):
        if kind in self.CREATES:
            ops.append(("create", self._string(body, o)[0]))
        elif kind == self.DELETE:
            ops.append(("delete", self._string(body, o)[0]))
        elif kind == self.MULTI:
            (count,) = struct.unpack_from(">i", body, o)
            o += 4
            for _ in range(count):
                sub, length = struct.unpack_from(">ii", body, o)
                o += 8
                self._record(sub, body[o:o + length], 0, ops)
                o += length
        elif kind == self.CLOSE_SESSION:
            ops.append(("close_session", None))
            if o + 4 <= len(body):
                (count,) = struct.unpack_from(">i", body, o)
                o += 4
                for _ in range(max(count, 0)):
                    path, o = self._string(body, o)
                    ops.append(("session_delete", path))
        elif kind == self.CREATE_SESSION:
            ops.append(("create_session", None))
        elif kind == -1 and o + 4 <= len(body):  # a failed write (alone, or one operation of a failed multi)
            (err,) = struct.unpack_from(">i", body, o)
            ops.append(("other", "error %s" % self.ERRORS.get(err, err)))
        else:
            ops.append(("other", self.KINDS.get(kind, str(kind))))

    def count(self, base, zxid_from, zxid_to, t0=None):
        """What the transactions in (zxid_from, zxid_to] did under `base`: lock nodes (base/locks/ITEM/NODE), lock
        directories (base/locks/ITEM), party nodes (base/party/NODE). With `t0` (s since the epoch), also when: lock
        nodes created and deleted, and lock directories created, per tenth of a second since `t0`, by ZooKeeper's
        transaction time."""
        self.poll()
        c = {k: 0 for k in ("txns", "lock_creates", "lock_deletes", "lock_session_deletes", "lockdir_creates",
                             "lockdir_deletes", "party_creates", "party_deletes", "sessions_created",
                             "sessions_closed", "lock_txns", "lock_txns_single")}
        c["txn_kinds"], c["other_ops"] = {}, {}  # transactions by type; operations neither create nor delete
        c["session_closes"] = []  # [session id, time ZooKeeper stamped on the closeSession, in s]
        locks, party = base + "/locks/", base + "/party/"
        timeline = {}  # tenth of a second since t0 -> [lock creates, lock deletes, lock directory creates]
        for zxid, stamp, client, ops in self.txns:
            if not zxid_from < zxid <= zxid_to:
                continue
            if t0 is not None:
                creates = sum(1 for op, path in ops if op == "create" and path and path.startswith(locks)
                              and path[len(locks):].count("/") == 1)
                deletes = sum(1 for op, path in ops if op in ("delete", "session_delete") and path
                              and path.startswith(locks) and path[len(locks):].count("/") == 1)
                dirs = sum(1 for op, path in ops if op == "create" and path and path.startswith(locks)
                           and path[len(locks):].count("/") == 0)
                if creates or deletes or dirs:
                    bucket = timeline.setdefault(int((stamp / 1000.0 - t0) * 10 // 1), [0, 0, 0])
                    bucket[0] += creates
                    bucket[1] += deletes
                    bucket[2] += dirs
            c["txns"] += 1
            lock_ops = sum(1 for op, path in ops if op in ("create", "delete") and path and path.startswith(locks)
                           and path[len(locks):].count("/") == 1)
            if lock_ops:
                c["lock_txns"] += 1
                c["lock_txns_single"] += lock_ops == 1
            for op, path in ops:
                if op == "kind":
                    name = self.KINDS.get(path, str(path))
                    c["txn_kinds"][name] = c["txn_kinds"].get(name, 0) + 1
                elif op == "other":
                    c["other_ops"][path] = c["other_ops"].get(path, 0) + 1
                elif op == "create_session":
                    c["sessions_created"] += 1
                elif op == "close_session":
                    c["sessions_closed"] += 1
                    c["session_closes"].append([client, stamp / 1000.0])
                elif path and path.startswith(locks):
                    depth = path[len(locks):].count("/")
                    if depth == 1:
                        key = {"create": "lock_creates", "delete": "lock_deletes",
                               "session_delete": "lock_session_deletes"}[op]
                    else:
                        key = {"create": "lockdir_creates", "delete": "lockdir_deletes",
                               "session_delete": "lockdir_deletes"}[op]
                    c[key] += 1
                elif path and path.startswith(party):
                    c["party_creates" if op == "create" else "party_deletes"] += 1
                    if op == "create" and t0 is not None:
                        # The last member's join, by ZooKeeper's clock (a cold start counts from it).
                        c["last_party_create_s"] = round(max(c.get("last_party_create_s", 0.0), stamp / 1000.0 - t0), 4)
        if t0 is not None:
            c["lock_timeline"] = [[round(k / 10, 1)] + v for k, v in sorted(timeline.items())]
        # Keep memory bounded: transactions before this window are never asked for again.
        self.txns = [t for t in self.txns if t[0] > zxid_from]
        return c


GC_LINE = re.compile(r"GC\(\d+\) (Pause [A-Za-z]+.*?) (\d+)M->(\d+)M\((\d+)M\) ([\d.]+)ms")


class GcLog:
    """ZooKeeper's JVM GC log (-Xlog:gc): heap in use before and after each collection, and the pauses."""

    def __init__(self, path):
        self.path, self.offset = path, 0

    def mark(self):
        try:
            self.offset = os.path.getsize(self.path)
        except OSError:
            self.offset = 0

    def since_mark(self):
        try:
            with open(self.path, errors="replace") as f:
                f.seek(self.offset)
                text = f.read()
        except OSError:
            return None
        pauses = [(m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)), float(m.group(5)))
                  for m in GC_LINE.finditer(text)]
        return {
            "gcs": len(pauses),
            "full_gcs": sum(1 for p in pauses if p[0].startswith("Pause Full")),
            "heap_before_gc_max_mb": max((p[1] for p in pauses), default=None),
            "heap_after_gc_last_mb": pauses[-1][2] if pauses else None,
            "heap_after_gc_max_mb": max((p[2] for p in pauses), default=None),
            "heap_committed_mb": pauses[-1][3] if pauses else None,
            "gc_pause_max_ms": max((p[4] for p in pauses), default=None),
            "gc_pause_total_ms": round(sum(p[4] for p in pauses), 1),
        }


def proc_status(pid, *keys):
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                name, _, value = line.partition(":")
                if name in keys:
                    out[name] = int(value.split()[0])  # kB
    except OSError:
        pass
    return out


def proc_cpu_s(pid):
    """utime + stime of a process (its threads included), in seconds; None if it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def net_bytes(pid, interface="eth0"):
    """Bytes received and sent by the network namespace of `pid` (the container's eth0), IP/TCP headers included."""
    try:
        with open("/proc/%d/net/dev" % pid) as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name.strip() == interface:
                    fields = rest.split()
                    return int(fields[0]), int(fields[8])
    except OSError:
        pass
    return None


class Server:
    """Per-phase readings of the ZooKeeper server: requests, bytes, latency, heap, transactions."""

    def __init__(self, args):
        self.connect = args.connect
        if args.zk_pid:
            # A plain process on the host: its network namespace is the host's, shared with everything else, so
            # no byte counts.
            self.pid, self.count_bytes = args.zk_pid, False
        else:
            self.pid, self.count_bytes = int(subprocess.check_output(
                ["docker", "inspect", "-f", "{{.State.Pid}}", args.container], text=True).strip()), True
        self.txnlog = TxnLog(args.zk_data)
        self.gc = GcLog(args.zk_gc_log)
        self.rss_peak_kb = 0
        self.lock = threading.Lock()

    def sample(self):
        rss = proc_status(self.pid, "VmRSS").get("VmRSS", 0)
        with self.lock:
            self.rss_peak_kb = max(self.rss_peak_kb, rss)

    def begin(self):
        four_letter(self.connect, "srst")  # resets the server's request counters and latencies
        self.gc.mark()
        with self.lock:
            self.rss_peak_kb = proc_status(self.pid, "VmRSS").get("VmRSS", 0)
        self.m0 = mntr(self.connect)
        self.zxid0 = last_zxid(self.connect)
        self.net0 = net_bytes(self.pid) if self.count_bytes else None

    def end(self, base, t0=None):
        net1 = net_bytes(self.pid) if self.count_bytes else None
        m1 = mntr(self.connect)
        zxid1 = last_zxid(self.connect)

        def d(key):
            try:
                return int(m1[key]) - int(self.m0[key])
            except (KeyError, ValueError):
                return None

        def v(key, kind=float):
            try:
                return kind(m1[key])
            except (KeyError, ValueError):
                return None

        status = proc_status(self.pid, "VmRSS", "VmHWM")
        out = {
            "requests": d("zk_packets_received") - 1,  # the closing mntr is itself one packet
            "writes": d("zk_cnt_updatelatency"), "reads": d("zk_cnt_readlatency"),
            "request_bytes": d("zk_bytes_received_count"),
            "net_rx_bytes": net1[0] - self.net0[0] if net1 and self.net0 else None,
            "net_tx_bytes": net1[1] - self.net0[1] if net1 and self.net0 else None,
            "latency_avg_ms": v("zk_avg_latency"), "latency_max_ms": v("zk_max_latency"),
            "update_latency_p99_ms": v("zk_p99_updatelatency"), "update_latency_max_ms": v("zk_max_updatelatency"),
            "znodes": v("zk_znode_count", int), "watches": v("zk_watch_count", int),
            "ephemerals": v("zk_ephemerals_count", int), "sessions": v("zk_global_sessions", int),
            "approximate_data_mb": round(int(m1.get("zk_approximate_data_size", 0)) / 2**20, 1),
            "zxid_from": self.zxid0, "zxid_to": zxid1,
            "jvm_rss_peak_mb": round(max(self.rss_peak_kb, status.get("VmRSS", 0)) / 1024, 1),
            "jvm_rss_mb": round(status.get("VmRSS", 0) / 1024, 1),
        }
        out.update(self.gc.since_mark() or {})
        out.update(self.txnlog.count(base, self.zxid0, zxid1, t0))
        return out


# ------------------------------------------------------------------------------------------------ the members


class ProcessParty(Party):
    """rebalance.py's Party (one `zkp worker` process per member), with the member flags of this benchmark."""

    def __init__(self, args, mode, path, items_file):
        super().__init__(args, "eager-stride", path, items_file)
        self.scale_mode = mode

    def command(self, key):
        # rebalance.py's worker command line (--items-file, --int-items, --identifier, --time-boundary,
        # --max-reaction-time 1, --session-timeout, --json) with this benchmark's mode flags.
        return super().command(key)[:-len(MODES_REBALANCE_FLAGS)] + MODES[self.scale_mode]["flags"]

    def pids(self):
        # The sampler thread calls this while the main thread spawns members: copy the dict first (one C call, atomic
        # under the GIL) instead of iterating it in Python, which raised "dictionary changed size during iteration".
        return {i: p.pid for i, p in dict(self.procs).items()}

    def host_pid(self):
        return None

    def close(self):
        """SIGTERM to every member still running (each calls finish()), up to 60 s; then SIGKILL."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.time() + 60
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
        self.kill_all()


# rebalance.py's Party.command appends its own mode's flags; they are replaced by this benchmark's.
MODES_REBALANCE_FLAGS = ["--partition", "stride", "--rebalance", "eager"]


class HostedProc:
    """A member of the in-process host, seen through Party's process interface."""

    def __init__(self, host, identifier):
        self.host, self.identifier, self.returncode = host, identifier, None

    def send_signal(self, sig):
        self.host.command("%s %s" % ("leave" if sig == signal.SIGTERM else "crash", self.identifier))

    def kill(self):
        pass

    def poll(self):
        return self.returncode

    def wait(self):
        return self.returncode if self.returncode is not None else 0


class InProcessParty(Party):
    """Every member in one benches/scale.rs process (each with its own client and session), driven through stdin."""

    def __init__(self, args, mode, path, items_file, crashable):
        super().__init__(args, "eager-stride", path, items_file)
        self.crashable = crashable
        log = open(os.path.join(args.log_dir, "%s-host.stderr" % path.strip("/").replace("/", "_")), "w")
        command = [args.host_bin, "--connect", args.connect, "--path", path, "--items-file", items_file,
                   "--int-items", "--time-boundary", str(args.time_boundary), "--session-timeout",
                   str(args.session_timeout), "--max-reaction-time", "1"] + MODES[mode]["flags"]
        if args.host_threads:
            command += ["--worker-threads", str(args.host_threads)]
        self.host = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                     bufsize=1)
        log.close()
        self.host_lock = threading.Lock()
        threading.Thread(target=self._pump, daemon=True).start()

    def command(self, line):
        with self.host_lock:
            self.host.stdin.write(line + "\n")
            self.host.stdin.flush()

    def _pump(self):
        for line in self.host.stdout:
            line = line.strip()
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            identifier = record.pop("id", None)
            if identifier is None:
                continue
            if "exit" in record:
                self.procs[identifier].returncode = record["exit"]
                self.events.put((identifier, None))
            else:
                self.events.put((identifier, record))
        for identifier, proc in list(self.procs.items()):
            if proc.returncode is None:
                proc.returncode = -1
                self.events.put((identifier, None))

    def spawn(self, identifier):
        self.procs[identifier] = HostedProc(self, identifier)
        self.records[identifier] = []
        self.command("join %s%s" % (identifier, " crashable" if identifier in self.crashable else ""))

    def pids(self):
        return {}

    def host_pid(self):
        return self.host.pid

    def kill_all(self):
        if self.host.poll() is None:
            self.host.kill()
        self.host.wait()

    def close(self):
        """`quit`: every member still there calls finish() (the host allows 60 s), then the host exits."""
        try:
            self.command("quit")
            self.host.stdin.close()
            self.host.wait(timeout=90)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill_all()


class Sampler(threading.Thread):
    """Every 0.1 s: the CPU time of each member process (kept after it exits: its last reading), the host's, and the
    server's resident memory."""

    def __init__(self, party, server):
        super().__init__(daemon=True)
        self.party, self.server = party, server
        self.cpu, self.stop = {}, threading.Event()

    def read(self):
        for identifier, pid in list(self.party.pids().items()):
            cpu = proc_cpu_s(pid)
            if cpu is not None and self.party.procs[identifier].returncode is None:
                self.cpu[identifier] = cpu
        host = self.party.host_pid()
        if host:
            cpu = proc_cpu_s(host)
            if cpu is not None:
                self.cpu["<host>"] = cpu
        self.server.sample()
        return dict(self.cpu)

    def run(self):
        while not self.stop.wait(0.1):
            self.read()


def member_rss_mb(party):
    out = {}
    for identifier, pid in party.pids().items():
        hwm = proc_status(pid, "VmHWM").get("VmHWM")
        if hwm:
            out[identifier] = round(hwm / 1024, 1)
    return out


# ------------------------------------------------------------------------------------------------ one phase


def converge(party, live_before, live_after, tf, t_end, n):
    """From the member lines: when the live members last became stable (all ACQUIRED, a disjoint cover of the n
    items) after `tf`, items moved, double-owned item-seconds, sessions lost. Incremental: O(items in the lines)."""
    events = []
    latest = {}
    for identifier, records in party.records.items():
        initial = None
        for record in records:
            if record["ts"] <= tf:
                initial = record
            elif record["ts"] <= t_end:
                events.append((record["ts"], 0, identifier, record))
        latest[identifier] = initial
        stopped = party.stopped.get(identifier)
        if stopped is not None and stopped <= t_end:
            events.append((max(stopped, tf), 1, identifier, "stopped"))
    events.sort(key=lambda e: (e[0], e[1]))
    dead = {i for i, t in party.stopped.items() if t < tf}

    def owned(identifier):
        record = latest.get(identifier)
        if identifier in dead or record is None or record["state"] == "FAILURE":
            return ()
        return record["items"]

    count = {}
    for identifier in latest:
        for item in owned(identifier):
            count[item] = count.get(item, 0) + 1
    before_owner = {item: i for i in live_before for item in owned(i)}
    ones = sum(1 for c in count.values() if c == 1)
    excess = sum(c - 1 for c in count.values() if c > 1)
    not_acquired = {i for i in live_after if latest.get(i) is None or latest[i]["state"] != "ACQUIRED" or i in dead}
    outsiders = {i for i in latest if i not in live_after and owned(i)}

    def stable():
        return not not_acquired and not outsiders and ones == n and len(count) == n

    stable_since = tf if stable() else None
    double, t = 0.0, tf
    lost = []
    for ts, _, identifier, record in events:
        double += excess * (ts - t)
        t = ts
        for item in owned(identifier):
            c = count[item]
            ones += (c == 2) - (c == 1)
            excess -= c > 1
            if c == 1:
                del count[item]
            else:
                count[item] = c - 1
        if record == "stopped":
            dead.add(identifier)
        else:
            latest[identifier] = record
            if record["state"] == "FAILURE" and not record.get("finished"):
                lost.append([identifier, round(ts - tf, 3), record.get("cause", "")])
        for item in owned(identifier):
            c = count.get(item, 0) + 1
            count[item] = c
            ones += (c == 1) - (c == 2)
            excess += c > 1
        if identifier in live_after:
            if latest.get(identifier) and latest[identifier]["state"] == "ACQUIRED" and identifier not in dead:
                not_acquired.discard(identifier)
            else:
                not_acquired.add(identifier)
        elif owned(identifier):
            outsiders.add(identifier)
        else:
            outsiders.discard(identifier)
        if stable():
            stable_since = ts if stable_since is None else stable_since
        else:
            stable_since = None
    double += excess * (t_end - t)
    if stable_since is None:
        raise PhaseError("the party was not stable at the end of the observation")
    after_owner = {item: i for i in live_after for item in owned(i)}
    moved = sum(1 for item, owner in after_owner.items() if before_owner.get(item) != owner) if before_owner else None
    return {"time_to_cover_s": round(stable_since - tf, 4), "items_moved": moved,
            "double_owned_item_s": round(double, 6), "sessions_lost": lost,
            "held_before": {i: len(owned_before) for i, owned_before in
                            ((i, [x for x, o in before_owner.items() if o == i]) for i in live_before)}}


def pfn_ms(records, tf, t_end):
    """The partition function's cumulative milliseconds at the member's last line by `tf` and by `t_end`."""
    at_start = at_end = None
    for record in records:
        if "partition_fn_ms" not in record:
            continue
        if record["ts"] <= tf:
            at_start = record["partition_fn_ms"]
        if record["ts"] <= t_end:
            at_end = record["partition_fn_ms"]
    if at_end is None:
        return None
    return round(at_end - (at_start or 0.0), 3)


def run_once(args, observer, server, mode, hosting, run, items_file):
    n, p = args.items, args.members
    path = "/scale/%s-%s-%d-%s" % (hosting, mode, run, uuid.uuid4().hex[:8])
    members = ["w%03d" % i for i in range(p)]
    joiner, leaver, victim = "w%03d" % p, members[(4 * p) // 10], members[(7 * p) // 10]
    if hosting == "processes":
        party = ProcessParty(args, mode, path, items_file)
    else:
        party = InProcessParty(args, mode, path, items_file, crashable={victim})
    sampler = Sampler(party, server)
    sampler.start()
    base = {"mode": mode, "hosting": hosting, "run": run, "n": n, "p": p, "tb_s": args.time_boundary,
            "session_timeout_s": args.session_timeout, "zk_heap_mb": args.zk_heap_mb, "path": path,
            "host_threads": (args.host_threads or os.cpu_count()) if hosting == "inprocess" else None,
            "warmup": run == 0}
    scenario = "start"
    ok = True
    try:
        def begin():
            server.begin()
            return sampler.read()

        def measure(scenario, live_before, live_after, tf, cpu0, extra=None):
            t_end = time.time()
            cpu1 = sampler.read()
            zk = server.end(path, tf)
            conv = converge(party, live_before, live_after, tf, t_end, n)
            members_cpu = {i: round(cpu1[i] - cpu0.get(i, 0.0), 3) for i in cpu1 if i != "<host>"}
            pfn = {i: pfn_ms(records, tf, t_end) for i, records in party.records.items()}
            if scenario == "start":
                ideal_moved = n
                ideal_touched = n
            elif scenario == "join":
                ideal_moved = n / len(live_after)
                ideal_touched = 2 * ideal_moved
            else:
                gone = (set(live_before) - set(live_after)).pop()
                ideal_moved = conv["held_before"].get(gone, n / len(live_before))
                ideal_touched = 2 * ideal_moved
            touched = zk["lock_creates"] + zk["lock_deletes"] + zk["lock_session_deletes"]
            if scenario in ("leave", "crash"):
                # The departed member's items: when every one is listed ACQUIRED by a survivor (handover.py's
                # definition), from the signal.
                gone = (set(live_before) - set(live_after)).pop()
                orphans = handover.orphan_figures(party, [gone], sorted(live_after), tf, t_end)
                extra = dict(extra or {}, orphans=orphans["orphans"], orphans_taken_s=orphans["taken_s"],
                             kept_stopped=orphans["kept_stopped"])
            if scenario == "crash":
                # When ZooKeeper expired the crashed member's session (the closeSession transaction's time).
                gone = (set(live_before) - set(live_after)).pop()
                sessions = {r.get("session") for r in party.records.get(gone, [])}
                closes = [t for session, t in zk["session_closes"] if session in sessions]
                if closes:
                    extra = dict(extra or {}, expired_s=round(min(closes) - tf, 4),
                                 after_expiry_s=round(conv["time_to_cover_s"] - (min(closes) - tf), 4))
            result = dict(base, scenario=scenario, ok=True, members_before=len(live_before),
                          members_after=len(live_after),
                          failed_members=[i for i in party.failed if party.exited.get(i, (tf,))[0] >= tf],
                          time_to_cover_s=conv["time_to_cover_s"],
                          beyond_tb_s=round(conv["time_to_cover_s"] - args.time_boundary, 4),
                          items_moved=conv["items_moved"], ideal_moved=round(ideal_moved, 1),
                          locks_touched=touched, ideal_touched=round(ideal_touched, 1),
                          touched_ratio=round(touched / ideal_touched, 3) if ideal_touched else None,
                          double_owned_item_s=conv["double_owned_item_s"], sessions_lost=conv["sessions_lost"],
                          member_cpu_s=members_cpu, host_cpu_s=(round(cpu1["<host>"] - cpu0.get("<host>", 0.0), 3)
                                                                 if "<host>" in cpu1 else None),
                          partition_fn_ms=pfn, member_rss_mb=member_rss_mb(party),
                          host_rss_mb=(round(proc_status(party.host_pid(), "VmHWM").get("VmHWM", 0) / 1024, 1)
                                       if party.host_pid() else None),
                          zk=zk, phase_s=round(t_end - tf, 3))
            states = {}
            for records in party.records.values():
                for record in records:
                    if tf < record["ts"] <= t_end:
                        key = record["state"] + (" suspended" if record.get("suspended") else "")
                        states[key] = states.get(key, 0) + 1
            result["lines_by_state"] = states
            # Where the time went: when the live members entered each state in the phase (first RELEASE, first
            # ALLOCATING, last ACQUIRED), since the event: min, median, max over the members.
            marks = {}
            for identifier in live_after:
                records = [r for r in party.records.get(identifier, []) if tf < r["ts"] <= t_end]
                for state, pick in (("RELEASE", min), ("ALLOCATING", min), ("ACQUIRED", max)):
                    times = [r["ts"] - tf for r in records if r["state"] == state]
                    if times:
                        marks.setdefault(state, []).append(pick(times))
            result["state_marks_s"] = {state: [round(min(t), 3), round(statistics.median(t), 3), round(max(t), 3)]
                                       for state, t in marks.items()}
            result["members_released"] = sum(
                1 for records in party.records.values()
                if any(tf < r["ts"] <= t_end and r["state"] == "RELEASE" for r in records))
            result.update(extra or {})
            print(json.dumps(result), flush=True)
            say("%s %s run %d %s: cover after %.2f s (%+.2f s beyond tb), %d requests, locks touched %d "
                "(ideal %.0f), %d sessions lost" % (hosting, mode, run, scenario, result["time_to_cover_s"],
                                                    result["beyond_tb_s"], zk["requests"], touched, ideal_touched,
                                                    len(conv["sessions_lost"])))

        cpu0 = begin()
        tf = time.time()
        for identifier in members:
            party.spawn(identifier)
        # --join-after-s: the cold start ends that long after its cover instead of after --quiet-s of silence, so
        # that the join comes right after a cold start (its members' held-lock watches, registered time_boundary
        # after their allocation, then fall into the join's phase).
        quiet, args.quiet = args.quiet, (args.join_after_s if args.join_after_s is not None else args.quiet)
        try:
            live = party.settle(set(members), args.phase_timeout)
        finally:
            args.quiet = quiet
        first_join = min(r[0]["ts"] for i, r in party.records.items() if r)
        last_join = max(r[0]["ts"] for i, r in party.records.items() if r)
        measure("start", set(), live, tf, cpu0, {"spawned_s": round(first_join - tf, 3),
                                                "all_joined_s": round(last_join - tf, 3)})

        scenario = "join"
        cpu0 = begin()
        before = set(observer.get_children(path + "/party"))
        spawned = time.time()
        party.spawn(joiner)
        party.wait_for_first_line(joiner, 60)
        tf = new_party_node_ctime(observer, path + "/party", before)
        after = party.settle(live | {joiner}, args.phase_timeout)
        # What an operator waits for is counted from the spawn: the joiner's start-up (process, session, the set and
        # agreement reads) before its party node exists is part of it. The joiner's own ACQUIRED, apart.
        def last_acquired(identifiers):
            """The last ACQUIRED line of `identifiers` since the joiner's party node, from it."""
            times = [r["ts"] for i in identifiers for r in party.records.get(i, [])
                     if r["state"] == "ACQUIRED" and r["ts"] > tf]
            return round(max(times) - tf, 4) if times else None

        measure("join", live, after, tf, cpu0, {"node_after_spawn_s": round(tf - spawned, 4),
                                                "joiner_acquired_s": last_acquired([joiner]),
                                                "others_acquired_s": last_acquired(live)})
        live = after

        scenario = "leave"
        cpu0 = begin()
        tf = party.signal(leaver, signal.SIGTERM)
        after = party.settle(live - {leaver}, args.phase_timeout)
        measure("leave", live, after, tf, cpu0)
        live = after

        scenario = "crash"
        cpu0 = begin()
        tf = party.signal(victim, signal.SIGKILL)
        after = party.settle(live - {victim}, args.phase_timeout + args.session_timeout)
        measure("crash", live, after, tf, cpu0)
    except (PhaseError, subprocess.CalledProcessError, OSError) as err:
        ok = False
        say("%s %s run %d %s FAILED: %s" % (hosting, mode, run, scenario, err))
        lost = [[i, r["ts"], r.get("cause", "")] for i, rs in party.records.items() for r in rs
                if r["state"] == "FAILURE" and not r.get("finished")]
        print(json.dumps(dict(base, scenario=scenario, ok=False, error=str(err), sessions_lost=lost,
                              latest={i: (party.latest(i) or {}).get("state") for i in sorted(party.records)})),
              flush=True)
    finally:
        sampler.stop.set()
        party.close()
        # benches/partitioner.rs delete-tree: the run's lock directories, many deletes in flight (not measured).
        if args.bench_bin:
            subprocess.run([args.bench_bin, "delete-tree", "--connect", args.connect, "--path", path], check=False,
                           stdout=subprocess.DEVNULL)
    return ok


def drain_sessions(args):
    """Waits (up to the session timeout + 10 s) until the run's sessions are gone: members that exited without closing
    theirs (the in-process host's clients are detached) expire after the session timeout, and should not do so in
    the next run's phases. The observer's session remains."""
    deadline = time.time() + args.session_timeout + 10
    while time.time() < deadline:
        try:
            if int(mntr(args.connect).get("zk_global_sessions", 0)) <= 1:
                return
        except (OSError, SystemExit, ValueError):
            pass
        time.sleep(0.5)
    say("sessions of the last run still open after %.0f s" % (args.session_timeout + 10))


def run(args):
    from kazoo.client import KazooClient
    import logging

    logging.basicConfig(level=logging.CRITICAL)
    if args.own_process_group:
        os.setpgid(0, 0)  # bench/scale.sh ends this group, the member processes with it, however it ends
    os.makedirs(args.log_dir, exist_ok=True)
    items_file = os.path.join(args.log_dir, "items-%d.txt" % args.items)
    with open(items_file, "w") as f:
        f.write("\n".join(str(i) for i in range(args.items)) + "\n")
    modes, hostings = args.modes.split(","), args.hostings.split(",")
    for mode in modes:
        if mode not in MODES:
            raise SystemExit("unknown mode %r (known: %s)" % (mode, ", ".join(MODES)))
    for hosting in hostings:
        if hosting not in HOSTINGS:
            raise SystemExit("unknown hosting %r (known: %s)" % (hosting, ", ".join(HOSTINGS)))
    args.quiet = args.quiet_s
    server = Server(args)
    observer = KazooClient(hosts=args.connect, timeout=30)
    observer.start(timeout=30)
    failures = 0
    try:
        # The warm-up rounds (run 0): every mode once, in the first hosting, on the server the script just started.
        # Its JVM compiles its request paths during the first phases it serves (C2 took 14% of the 2 cores in the
        # first eager join at 100 x 100,000, and that join came 1.8 s later than the same join a round later); a
        # ZooKeeper in production has long done that. Their lines carry "warmup": true and get a table of their own.
        rounds = [(0, hostings[0], mode) for _ in range(args.warmup) for mode in modes]
        rounds += [(run_index, hosting, mode) for run_index in range(1, args.runs + 1) for hosting in hostings
                   for mode in modes]
        for run_index, hosting, mode in rounds:
            say("%s, %s, %s: %d members, %d items" % (
                "warm-up" if run_index == 0 else "run %d/%d" % (run_index, args.runs), HOSTINGS[hosting],
                MODES[mode]["label"], args.members, args.items))
            failures += not run_once(args, observer, server, mode, hosting, run_index, items_file)
            drain_sessions(args)
    finally:
        observer.stop()
        observer.close()
    sys.exit(1 if failures else 0)


# ------------------------------------------------------------------------------------------------ report


def fmt_mb(value):
    return "–" if value is None else ("%.0f MB" % value if value >= 10 else "%.1f MB" % value)


def fmt_bytes(value):
    if value is None:
        return "–"
    for unit, size in (("GB", 2**30), ("MB", 2**20), ("kB", 2**10)):
        if value >= size:
            return "%.1f %s" % (value / size, unit)
    return "%d B" % value


def fmt_ms(value):
    return "–" if value is None else ("%.0f ms" % value if value >= 10 else "%.1f ms" % value)


DEFINITIONS = """\
**Members.** `processes`: every member is a separate `zkp worker` process (release build, as in the
rebalance benchmark, whose `Party` class `bench/scale.py` reuses), with its own ZooKeeper session. `in one process`:
every member lives in one `benches/scale.rs` process (release build), each with its own client and session, on one
multi-threaded Tokio runtime (one worker thread per core unless `INPROCESS_THREADS` says otherwise; the partition
function runs on those threads, as do the sessions' pings); it prints the same JSON lines. Items are the integers 0..N-1, read from a file
(`--items-file --int-items`). Modes: **default** = `--partition stride --rebalance eager` (kazoo's behaviour);
**low-movement** = `--partition rendezvous --rebalance incremental`; optionally **low-movement + session-aware**
(`--session-policy session-aware`). Every member: time_boundary {tb}, session timeout {st}, `max_reaction_time` 1 s.

**Warm-up.** The script starts its own ZooKeeper, whose JVM compiles its request paths while it serves its first
phases. Before the measured runs, one untimed round of every mode (`WARMUP`, in the first hosting) warms it, as a
server in production is warm; the tables cover the measured runs, and the warm-up round's times are listed apart
after the goals. Sessions lost and the safety check count every phase, the warm-up's included.

**Scenarios**, one after the other on a fresh path, each starting from a stable party: **start**: P members launched
at once (the clock starts before the first process is spawned, so process start-up, connection and joining are
included); **join**: a P+1-th member; **leave**: one member is told to leave (a process: SIGTERM, the worker calls
`finish()` and exits; in one process: `finish()`); **crash**: another member dies without `finish()` (a process:
SIGKILL; in one process: its connection, which went through a TCP proxy of its own, is cut and its worker loop
aborted, the client being detached so that nothing closes the session): its session, party node and locks linger
until the session timeout. A phase ends once the party is stable and no member has printed anything for
`QUIET_S` (8 s by default): each member registers its held-lock watches `time_boundary` after its allocation,
which belongs to the phase and must not overlap the next one.

**Time to cover**: from the event (start: the spawn of the first member; join: the `ctime` ZooKeeper stamped on the
joiner's party node; leave and crash: the signal or command) to the start of the final period in which every live
member's latest line is `ACQUIRED` and their items form a disjoint cover of the N items. **Beyond tb**: that time
minus time_boundary (the wait for a stable party that every mode must do). For the crash, the session timeout must
pass first: *session expired at* is the time ZooKeeper stamped on the crashed session's `closeSession` transaction
(read from its transaction log), from the SIGKILL; *cover after it*: from that expiry to the cover (time_boundary
plus the rebalance). In one process the host process is started, and has read the items, before the clock of the cold
start starts; separate processes are started on the clock. A cold start is also counted *from the last join*:
from the creation of the last member's party node (ZooKeeper's transaction time), when a cover of the whole party
first becomes possible; the cold-start goal is judged on it (starting 100 processes on 2 cores takes 4-5 s). A join
is also counted *from the joiner's spawn*, what an operator waits for: the joiner's start-up (process, session, reads)
until its party node exists, plus the time to cover; every run's value is listed, with when the joiner and the last
of the others were `ACQUIRED`.

**ZooKeeper** (the server's own figures, reset with `srst` at the start of each phase): *requests* =
`zk_packets_received` (every request of every session, pings included; a `multi` counts 1) minus the closing `mntr`;
*failed writes*: write requests that failed (a `multi` fails whole), counted from the transaction log,
where ZooKeeper logs them as `error` transactions (the JSON lines keep their error codes in `zk.other_ops`);
*bytes in / out*: the container's `eth0` counters (`/proc/<ZooKeeper pid>/net/dev`, read from the host), so IP/TCP
headers are included; *latency*: `zk_avg_latency` / `zk_max_latency` (ms, from request arrival to response, over the
phase); *heap*: from the JVM's GC log (`-Xlog:gc`, heap `-Xmx{heap}`): the largest heap in use before a collection
during the phase, and after the last one (the live data, roughly), the number of collections and the longest pause;
`no GC` when the phase had no collection;
*JVM RSS*: the server process's peak resident memory during the phase (sampled every 0.1 s from `/proc`).

**Lock nodes touched**: counted from ZooKeeper's transaction log (`dataLogDir`, mounted on the host and parsed by
`bench/scale.py`): every lock node (`<path>/locks/<item>/<node>`) created or deleted by a transaction committed during
the phase, inside `multi`s included, plus those a closed or expired session deleted (ZooKeeper 3.8 writes their paths
into the `closeSession` transaction). *Lock transactions*: the committed write transactions that created or deleted
lock nodes (a `multi` counts 1), and in brackets how many of them touched a single lock node. Lock directories and party nodes are counted apart and not included. **Ideal**:
start: N creates; join: 2 × N/(P+1) (the joiner's fair share moves: one delete and one create per item); leave and
crash: 2 × the items the departing member held. **Items moved**: items whose owner (by member) differs between the
stable states before and after.

**Sessions lost**: lines in `FAILURE` state that are not a clean `finish()` (a member whose session expired or that
hit an error it cannot retry), and members that exited on their own. Goal: 0.

**Members' costs**, over the phase: *CPU*: utime + stime (`/proc/<pid>/stat`, every thread) of each member process,
sampled every 0.1 s (a departing member: its last reading before exit); shown as the sum over members and the
largest member; in one process, the host process's total. *Partition function*: the cumulative `partition_fn_ms` of
each member's JSON lines (the worker prints it when the library or the worker provides it; the in-process host
times every call of its partition function with a wrapper), difference between the last line before the event and
the last line of the phase; `n/a` when the lines do not carry it. *RSS*: each member process's peak resident memory
(`VmHWM`) at the end of the phase (since its start); in one process, the host's.
"""


def rewrap(text, width=117):
    """Paragraphs (separated by blank lines) wrapped again at `width` columns."""
    import textwrap
    return "\n\n".join(textwrap.fill(" ".join(p.split()), width, break_on_hyphens=False, break_long_words=False)
                       for p in text.split("\n\n") if p.strip()) + "\n"


def from_last_join(r):
    """A cold start's time beyond time_boundary counted from the last member's join: the creation of the last party
    node, by ZooKeeper's transaction time (older lines: the last member's first line, a little later)."""
    joined = r.get("zk", {}).get("last_party_create_s", r.get("all_joined_s"))
    return r["beyond_tb_s"] - (joined or 0.0)


def from_spawn(r):
    """A join's time to cover counted from the joiner's spawn (what an operator waits for), where the phase has it."""
    return r["time_to_cover_s"] + r.get("node_after_spawn_s", 0.0)


def lost_members(r):
    """Members of phase `r` that lost their session or exited on their own (a FAILURE line, an exit, or both)."""
    return {x[0] for x in r.get("sessions_lost", [])} | set(r.get("new_failed_members", r.get("failed_members", [])))


def report(args):
    rows = [json.loads(line) for line in open(args.file) if line.strip()]
    seen = {}  # per run (path): members already counted as failed in an earlier phase
    for r in rows:
        before = seen.setdefault(r.get("path"), set())
        r["new_failed_members"] = [m for m in r.get("failed_members", []) if m not in before]
        before.update(r.get("failed_members", []))
    # Sessions and safety count over every phase; the tables and time goals over the measured runs only.
    every = rows
    warm = [r for r in rows if r.get("warmup")]
    rows = [r for r in rows if not r.get("warmup")]
    ok = [r for r in rows if r.get("ok")]
    failed = [r for r in rows if not r.get("ok")]
    sample = (ok or rows or [{}])[0]
    tb, st, heap = sample.get("tb_s", 2), sample.get("session_timeout_s", 10), sample.get("zk_heap_mb", 256)
    ps = sorted({r["p"] for r in rows if "p" in r})
    ns = sorted({r["n"] for r in rows if "n" in r})
    out = []
    w = out.append
    w("## %s" % args.title)
    w("")
    w("%s members over %s items: cold start, a join, a leave and a crash, for each mode and hosting, against one "
      "ZooKeeper with a %d MB heap." % ("/".join(str(p) for p in ps), "/".join("{:,}".format(n) for n in ns), heap))
    w("")
    w("```sh")
    w(args.command)
    w("```")
    w("")
    w("### What is measured")
    w("")
    w(rewrap(DEFINITIONS.format(tb="%g s" % tb, st="%g s" % st, heap="%dm" % heap)))
    w("### Results")
    w("")
    if args.machine:
        w(args.machine)
        w("")
    w("Median [min–max] over the runs where there are several.")
    w("")
    titles = {"start": "Cold start: P members launched at once",
              "join": "A join: the P+1-th member",
              "leave": "A leave (SIGTERM: finish())",
              "crash": "A crash (SIGKILL: the session lingers until the session timeout)"}
    keys = sorted({(r["hosting"], r["mode"]) for r in rows if "hosting" in r},
                  key=lambda k: (list(HOSTINGS).index(k[0]), list(MODES).index(k[1])))
    for scenario in SCENARIOS:
        sample = [r for r in ok if r["scenario"] == scenario]
        if not sample and not any(r["scenario"] == scenario for r in failed):
            continue
        w("#### %s" % titles[scenario])
        w("")
        head1 = ["Members", "Mode", "P → P'", "time to cover", "beyond tb", "sessions lost", "items moved",
                 "lock nodes touched", "ideal", "touched ÷ ideal", "lock transactions (single-node)"]
        if scenario == "crash":
            head1[4] = "session expired at; cover after it"
        if scenario == "start":
            head1[6] = "last member joined (its party node)"
        head2 = ["Members", "Mode", "ZK requests (writes / reads)", "failed writes", "ZK bytes in / out", "ZK latency avg / max",
                 "ZK heap before / after GC", "ZK JVM RSS (peak)", "member CPU (sum; max)",
                 "partition fn (sum; max)", "member RSS (max)"]
        rows1, rows2 = [], []
        for hosting, mode in keys:
            mine = [r for r in sample if r["hosting"] == hosting and r["mode"] == mode]
            bad = [r for r in failed if r["hosting"] == hosting and r["mode"] == mode and r["scenario"] == scenario]
            label = MODES[mode]["label"] + (" (%d failed)" % len(bad) if bad else "")
            if not mine:
                if bad:
                    rows1.append([HOSTINGS[hosting], label, "failed: " + "; ".join(r["error"] for r in bad)] +
                                 [""] * (len(head1) - 3))
                continue
            zk = [r["zk"] for r in mine]
            inproc = hosting == "inprocess"
            cpu = (summary([r["host_cpu_s"] for r in mine], lambda v: "%.1f s" % v) + " (host)" if inproc else
                   summary([sum(r["member_cpu_s"].values()) for r in mine], lambda v: "%.1f s" % v) + "; max " +
                   summary([max(r["member_cpu_s"].values(), default=0) for r in mine], lambda v: "%.2f s" % v))
            pfn_rows = [[v for v in r["partition_fn_ms"].values() if v is not None] for r in mine]
            pfn = ("n/a" if not any(pfn_rows) else
                   summary([sum(v) for v in pfn_rows], fmt_ms) + "; max " +
                   summary([max(v, default=0) for v in pfn_rows], fmt_ms))
            rss = (summary([r["host_rss_mb"] for r in mine], fmt_mb) + " (host)" if inproc else
                   summary([max(r["member_rss_mb"].values(), default=None) for r in mine], fmt_mb))
            heap_cell = ("no GC" if all(z.get("heap_before_gc_max_mb") is None for z in zk) else
                    summary([z.get("heap_before_gc_max_mb") for z in zk], fmt_mb) + " / " +
                    summary([z.get("heap_after_gc_last_mb") for z in zk], fmt_mb) +
                    " (%s GCs, max pause %s)" % (summary([z.get("gcs") for z in zk], fmt_num),
                                                  summary([z.get("gc_pause_max_ms") for z in zk], fmt_ms)))
            beyond = summary([r["beyond_tb_s"] for r in mine], fmt_s)
            if scenario == "crash":
                beyond = "%s; %s" % (summary([r.get("expired_s") for r in mine], fmt_s),
                                     summary([r.get("after_expiry_s") for r in mine], fmt_s))
            rows1.append([HOSTINGS[hosting], label,
                          "%d → %d" % (mine[0]["members_before"], mine[0]["members_after"]),
                          summary([r["time_to_cover_s"] for r in mine], fmt_s),
                          beyond,
                          summary([len(lost_members(r)) for r in mine], fmt_num),
                          (summary([r["items_moved"] for r in mine], fmt_num) if scenario != "start" else
                           summary([r.get("zk", {}).get("last_party_create_s", r.get("all_joined_s"))
                                    for r in mine], fmt_s)),
                          summary([r["locks_touched"] for r in mine], fmt_num),
                          summary([r["ideal_touched"] for r in mine], fmt_num),
                          summary([r["touched_ratio"] for r in mine], lambda v: "×%.2f" % v),
                          summary([r["zk"].get("lock_txns") for r in mine], fmt_num) + " (%s)" % summary(
                              [r["zk"].get("lock_txns_single") for r in mine], fmt_num)])
            rows2.append([HOSTINGS[hosting], MODES[mode]["label"],
                          summary([z["requests"] for z in zk], fmt_num) + " (%s / %s)" % (
                              summary([z["writes"] for z in zk], fmt_num), summary([z["reads"] for z in zk], fmt_num)),
                          summary([z["txn_kinds"].get("error", 0) if "txn_kinds" in z else None for z in zk],
                                  fmt_num),
                          summary([z["net_rx_bytes"] for z in zk], fmt_bytes) + " / " +
                          summary([z["net_tx_bytes"] for z in zk], fmt_bytes),
                          summary([z["latency_avg_ms"] for z in zk], fmt_ms) + " / " +
                          summary([z["latency_max_ms"] for z in zk], fmt_ms),
                          heap_cell, summary([z["jvm_rss_peak_mb"] for z in zk], fmt_mb), cpu, pfn, rss])
        for head, table in ((head1, rows1), (head2, rows2)):
            w("| " + " | ".join(head) + " |")
            w("|" + "---|" * len(head))
            for cells in table:
                w("| " + " | ".join(cells) + " |")
            w("")
    spawned = [r for r in ok if r["scenario"] == "join" and r.get("node_after_spawn_s") is not None]
    if spawned:
        w("#### The join from the joiner's spawn, every run")
        w("")
        w("From the joiner's spawn (process start, connection, set and agreement reads, then its party node), in "
          "seconds: when its party node was created; when the last of the other members and the joiner were last "
          "`ACQUIRED`; the cover; the cover beyond time_boundary.")
        w("")
        w("| Members | Mode | run | party node | others ACQUIRED | joiner ACQUIRED | cover | beyond tb |")
        w("|---|---|---|---|---|---|---|---|")
        for r in sorted(spawned, key=lambda r: (list(HOSTINGS).index(r["hosting"]), list(MODES).index(r["mode"]),
                                                r["run"])):
            node = r["node_after_spawn_s"]
            w("| %s | %s | %d | %s | %s | %s | %s | %s |" % (
                HOSTINGS[r["hosting"]], MODES[r["mode"]]["label"], r["run"], fmt_s(node),
                fmt_s(r["others_acquired_s"] + node) if r.get("others_acquired_s") is not None else "–",
                fmt_s(r["joiner_acquired_s"] + node) if r.get("joiner_acquired_s") is not None else "–",
                fmt_s(from_spawn(r)), fmt_s(from_spawn(r) - r["tb_s"])))
        w("")
    # Goals.
    w("#### Goals")
    w("")
    w("| Goal | Result |")
    w("|---|---|")

    def verdict(cond, detail):
        return ("✅ met" if cond else "❌ missed") + " (%s)" % detail

    joins = [r for r in ok if r["scenario"] == "join"]
    starts = [r for r in ok if r["scenario"] == "start"]
    if joins:
        worst = max(joins, key=lambda r: r["beyond_tb_s"])
        w("| a join converges within time_boundary + 3 s, every mode | %s |" % verdict(
            worst["beyond_tb_s"] <= 3, "worst: %s beyond tb, %s, %s" % (
                fmt_s(worst["beyond_tb_s"]), HOSTINGS[worst["hosting"]], MODES[worst["mode"]]["label"])))
    if starts:
        # Judged from the last member's join, when a cover of the whole party first becomes possible; before it,
        # the machine is starting P processes (4-5 s for 100 on 2 cores), which is not the library's doing.
        worst = max(starts, key=from_last_join)
        w("| cold start within time_boundary + 5 s (from the last join) | %s |" % verdict(
            from_last_join(worst) <= 5, "worst: %s beyond tb from the last join (%s from the first spawn), %s, %s" % (
                fmt_s(from_last_join(worst)), fmt_s(worst["beyond_tb_s"]), HOSTINGS[worst["hosting"]],
                MODES[worst["mode"]]["label"])))
    lost = sum(len(lost_members(r)) for r in every)
    every_failed = [r for r in every if not r.get("ok")]
    w("| no session lost, ZooKeeper at %d MB heap, any step | %s |" % (heap, verdict(
        lost == 0 and not every_failed, "%d lost over %d phases%s%s" % (
            lost, len(every), " (warm-up rounds included)" if warm else "",
            ", %d phases failed" % len(every_failed) if every_failed else ""))))
    spawned = [r for r in joins if r.get("node_after_spawn_s") is not None]
    for label, bound, picked in (
            ("incremental", 1.5, [r for r in spawned if r["mode"].startswith("incremental")]),
            ("eager", 3, [r for r in spawned if r["mode"].startswith("eager")])):
        if picked:
            worst = max(picked, key=from_spawn)
            w("| a join under %s rebalancing, from the joiner's spawn, within time_boundary + %g s, every run | %s |"
              % (label, bound, verdict(from_spawn(worst) - worst["tb_s"] <= bound, "worst: %s beyond tb, %s; "
                                       "every run: %s" % (fmt_s(from_spawn(worst) - worst["tb_s"]),
                                                          HOSTINGS[worst["hosting"]],
                                                          ", ".join(fmt_s(from_spawn(r) - r["tb_s"])
                                                                    for r in picked)))))
    inc = [r for r in joins if r["mode"].startswith("incremental")]
    if inc:
        worst = max(inc, key=lambda r: r["touched_ratio"])
        w("| a join under incremental rebalancing touches ≤ 1.2 × the ideal lock nodes | %s |" % verdict(
            worst["touched_ratio"] <= 1.2, "worst: %d touched, ideal %.0f, ×%.2f, %s" % (
                worst["locks_touched"], worst["ideal_touched"], worst["touched_ratio"], HOSTINGS[worst["hosting"]])))
    w("")
    every_ok = [r for r in every if r.get("ok")]
    doubles = [r for r in every_ok if r["double_owned_item_s"] > 0]
    w("Safety check: item-seconds during which two members listed the same item at once: %s over the %d "
      "phases%s." % ("0" if not doubles else "NOT 0 in %d phases (%s)" % (
          len(doubles), ", ".join("%s %s %s run %d" % (r["hosting"], r["mode"], r["scenario"], r["run"])
                                  for r in doubles)), len(every_ok), " (warm-up rounds included)" if warm else ""))
    losses = ["%s %s %s run %d: %s" % (r["hosting"], r["mode"], r["scenario"], r["run"],
                                      ", ".join("%s (%s)" % (x[0], x[2]) for x in r["sessions_lost"]))
              for r in every if r.get("sessions_lost")]
    if losses:
        w("")
        w("Sessions lost: " + "; ".join(losses) + ".")
    if every_failed:
        w("")
        w("Failed phases: " + "; ".join("%s %s %s run %d: %s" % (r["hosting"], r["mode"], r["scenario"], r["run"],
                                                                  r["error"]) for r in every_failed) + ".")
    if warm:
        w("")
        w("#### The warm-up round (run 0: ZooKeeper's JVM fresh, not in the tables above)")
        w("")
        w("Time beyond time_boundary (crash: cover after the session's expiry), sessions lost, and ZooKeeper's time in "
          "GC pauses over the phase.")
        w("")
        w("| Members | Mode | " + " | ".join(SCENARIOS) + " |")
        w("|" + "---|" * (2 + len(SCENARIOS)))
        for hosting, mode in sorted({(r["hosting"], r["mode"]) for r in warm},
                                    key=lambda k: (list(HOSTINGS).index(k[0]), list(MODES).index(k[1]))):
            cells = []
            for scenario in SCENARIOS:
                mine = [r for r in warm if r["hosting"] == hosting and r["mode"] == mode and r["scenario"] == scenario]
                good = [r for r in mine if r.get("ok")]
                if not good:
                    cells.append("failed" if mine else "")
                    continue
                key = "after_expiry_s" if scenario == "crash" else "beyond_tb_s"
                time_cell = summary([r.get(key) for r in good], fmt_s)
                if scenario == "start":
                    time_cell = "%s (from the last join: %s)" % (time_cell,
                                                                summary([from_last_join(r) for r in good], fmt_s))
                cells.append("%s; %s lost; GC %s" % (
                    time_cell, summary([len(lost_members(r)) for r in good], fmt_num),
                    summary([r["zk"].get("gc_pause_total_ms") for r in good], fmt_ms)))
            w("| %s | %s | %s |" % (HOSTINGS[hosting], MODES[mode]["label"], " | ".join(cells)))
    departures = [r for r in ok if r["scenario"] in ("leave", "crash") and r.get("orphans_taken_s") is not None]
    if departures:
        w("")
        w("The departed member's items (bench/handover.py's *taken*: until every one is listed ACQUIRED by a "
          "survivor; from the SIGTERM or SIGKILL; for the crash also from the session's expiry): " + "; ".join(
              "%s %s %s run %d: %d items, %s%s, %d kept items stopped" % (
                  HOSTINGS[r["hosting"]], MODES[r["mode"]]["label"], r["scenario"], r["run"], r["orphans"],
                  fmt_s(r["orphans_taken_s"]),
                  " (%s after the expiry)" % fmt_s(r["orphans_taken_s"] - r["expired_s"]) if "expired_s" in r else "",
                  r["kept_stopped"])
              for r in departures) + ".")
    if ok:
        w("")
        w("ZooKeeper at the end of each run's crash phase (nodes, watches, data): " + "; ".join(
            "%s %s: %s znodes, %s watches, %s MB" % (HOSTINGS[r["hosting"]], MODES[r["mode"]]["label"],
                                                   fmt_num(r["zk"]["znodes"]), fmt_num(r["zk"]["watches"]),
                                                   r["zk"]["approximate_data_mb"])
            for r in ok if r["scenario"] == "crash") + ".")
    print("\n".join(out))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--connect", required=True)
    r.add_argument("--container", help="the ZooKeeper container (its pid: memory, network counters)")
    r.add_argument("--zk-pid", type=int, help="instead of --container: the pid of ZooKeeper run as a plain process")
    r.add_argument("--zk-data", required=True, help="the host directory mounted as ZooKeeper's dataLogDir")
    r.add_argument("--zk-gc-log", required=True, help="the host path of ZooKeeper's GC log")
    r.add_argument("--zk-heap-mb", type=int, default=256)
    r.add_argument("--rust-worker", default="target/release/zkp worker")
    r.add_argument("--host-bin", default="", help="the benches/scale.rs executable (in-process hosting)")
    r.add_argument("--host-threads", type=int, default=0,
                   help="the in-process host's Tokio worker threads (default: Tokio's, one per core)")
    r.add_argument("--bench-bin", default="", help="the benches/partitioner.rs executable (delete-tree after a run)")
    r.add_argument("--runs", type=int, default=1)
    r.add_argument("--warmup", type=int, default=1,
                   help="untimed rounds (every mode, the first hosting) before the runs, to warm ZooKeeper's JVM")
    r.add_argument("--modes", default="eager-stride,incremental-rendezvous")
    r.add_argument("--hostings", default="processes,inprocess")
    r.add_argument("--items", type=int, default=10000)
    r.add_argument("--members", type=int, default=10)
    r.add_argument("--time-boundary", type=float, default=2.0)
    r.add_argument("--session-timeout", type=float, default=10.0)
    r.add_argument("--phase-timeout", type=float, default=300.0, help="seconds a phase may take to settle")
    r.add_argument("--quiet-s", type=float, default=8.0, help="seconds without a member line that end a phase")
    r.add_argument("--join-after-s", type=float, default=None,
                   help="end the cold start this many seconds after its cover (the join right after a cold start)")
    r.add_argument("--log-dir", default="/tmp/zkp-scale")
    r.add_argument("--own-process-group", action="store_true", help="run in a process group of its own")
    p = sub.add_parser("report")
    p.add_argument("file")
    p.add_argument("--machine", default="")
    p.add_argument("--title", default="Scale: P members over N items")
    p.add_argument("--command", default="bash bench/scale.sh")
    args = parser.parse_args()
    run(args) if args.command == "run" else report(args)


if __name__ == "__main__":
    main()
