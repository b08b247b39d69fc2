#!/usr/bin/env python3
"""Waits (up to 90 s) until the ZooKeeper at HOST:PORT serves, then prints its version (e.g. 3.8.0).

    zk_version=$(python3 bench/wait_serving.py HOST:PORT)

Shared by bench/run.sh, bench/rebalance.sh and bench/scale.sh.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kazoo_bench import mntr  # noqa: E402


def main():
    connect = sys.argv[1]
    deadline = time.time() + 90
    while True:
        try:
            stats = mntr(connect)
            if stats.get("zk_server_state") in ("standalone", "leader"):
                print(stats["zk_version"].split("-")[0])
                return
        except (OSError, SystemExit, KeyError):
            pass
        if time.time() > deadline:
            sys.exit("ZooKeeper did not start serving within 90 s")
        time.sleep(0.5)


if __name__ == "__main__":
    main()
