#!/usr/bin/env python3
"""kazoo's SetPartitioner worker loop: the Python counterpart of `zkp worker`.

Used by the interop tests (tests/interop.rs) to put real kazoo members in a party with Rust members. Prints one JSON
object per state change on stdout: ts, state, member (kazoo's member name is its identifier), items (when ACQUIRED),
generation (kazoo's state_id) and session (the ZooKeeper session id). SIGTERM/SIGINT: finish() and exit 0.
"""
import argparse
import json
import signal
import sys
import time

from kazoo.client import KazooClient


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--connect", required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--items", required=True, help="comma-separated items")
    parser.add_argument("--int-items", action="store_true", help="items are integers")
    parser.add_argument("--identifier", required=True)
    parser.add_argument("--time-boundary", type=float, default=30)
    parser.add_argument("--max-reaction-time", type=float, default=1)
    parser.add_argument("--session-timeout", type=float, default=10)
    parser.add_argument("--auth", help="digest USER:PASSWORD: authenticate, and create every node creator-all")
    args = parser.parse_args()

    items = [int(x) if args.int_items else x for x in args.items.split(",") if x != ""]
    extra = {}
    if args.auth:
        from kazoo.security import make_digest_acl

        user, password = args.auth.split(":", 1)
        extra = {"auth_data": [("digest", args.auth)], "default_acl": [make_digest_acl(user, password, all=True)]}
    client = KazooClient(hosts=args.connect, timeout=args.session_timeout, **extra)
    client.start(timeout=15)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))

    partitioner = client.SetPartitioner(
        path=args.path,
        set=items,
        identifier=args.identifier,
        time_boundary=args.time_boundary,
        max_reaction_time=args.max_reaction_time,
    )

    def emit(state):
        record = {
            "ts": time.time(),
            "state": state,
            "member": args.identifier,
            "generation": partitioner.state_id,
            "items": list(partitioner) if state == "ACQUIRED" else [],
            "session": client.client_id[0] if client.client_id else None,
        }
        print(json.dumps(record), flush=True)

    seen = None
    while not stopping:
        current = (partitioner.state, partitioner.state_id)
        if current != seen:
            seen = current
            emit(partitioner.state)
        if partitioner.failed:
            sys.exit(1)
        elif partitioner.release:
            partitioner.release_set()
        else:
            time.sleep(0.02)

    partitioner.finish()
    emit(partitioner.state)
    client.stop()
    client.close()


if __name__ == "__main__":
    main()
