#!/usr/bin/env bash
# The shared set benchmark of BENCHMARKS.md ("Changing the set"): a party of 10 members over 10,000 and 100,000
# items; an admin adds 1 item, adds 1,000, removes 1,000; time until every member is ACQUIRED again, ZooKeeper requests,
# items moved, and items that kept their owner but were stopped anyway.
#
#   bash bench/shared_set.sh        # ~3 minutes on 2 cores
#
# It ensures the ZooKeeper image (docker/zookeeper/build.sh: builds it locally if missing, never pulls), builds the
# bench binary in release mode, starts ONE ZooKeeper container (removed on exit), and runs benches/shared_set.rs for
# every size and rebalance mode. Knobs (environment): SIZES ("10000 100000"), MODES ("incremental eager"), MEMBERS (10),
# TIME_BOUNDARY (1), ZOOKEEPER_IMAGE (zk-partitioner/zookeeper:3.8). Output: a markdown table on stdout, JSON lines in
# bench/results/shared_set.jsonl.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SIZES=${SIZES:-10000 100000}
MODES=${MODES:-incremental eager}
MEMBERS=${MEMBERS:-10}
TIME_BOUNDARY=${TIME_BOUNDARY:-1}
image=${ZOOKEEPER_IMAGE:-zk-partitioner/zookeeper:3.8}
container="zkp-shared-set-$$"
trap 'docker rm -f -v "$container" >/dev/null 2>&1 || true' EXIT

bash docker/zookeeper/build.sh "$image" >&2
# shellcheck source=bench/cargo_exe.sh
. bench/cargo_exe.sh
bench=$(cargo_exe shared_set bench --bench shared_set --no-run)

# A 1 GB heap: 100,000 items' lock directories and set children, twice over, with room to spare.
docker run -d --rm --name "$container" \
    -e 'ZOO_4LW_COMMANDS_WHITELIST=*' -e ZOO_MAX_CLIENT_CNXNS=0 -e ZOO_TICK_TIME=200 -e 'JVMFLAGS=-Xmx1g' \
    -p 127.0.0.1::2181 "$image" >/dev/null
port=$(docker port "$container" 2181/tcp | head -n1 | sed 's/.*://')
connect="127.0.0.1:$port"
for _ in $(seq 1 90); do
    if echo ruok | timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port; cat >&3; cat <&3" 2>/dev/null | grep -q imok; then
        break
    fi
    sleep 1
done

mkdir -p bench/results
out=bench/results/shared_set.jsonl
: >"$out"
for size in $SIZES; do
    for mode in $MODES; do
        echo "[shared_set.sh] $MEMBERS members, $size items, $mode" >&2
        "$bench" --connect "$connect" --members "$MEMBERS" --items "$size" --rebalance "$mode" \
            --time-boundary "$TIME_BOUNDARY" --path "/bench/$mode" | tee -a "$out" >&2
    done
done
python3 - "$out" "$MEMBERS" "$TIME_BOUNDARY" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
print(f"| items | rebalance | change | converged (s) | of it, the update (s) | ZooKeeper requests | items moved | kept but stopped |")
print("|---:|---|---|---:|---:|---:|---:|---:|")
for r in rows:
    print(f"| {r['items']:,} | {r['rebalance']} | {r['change']} | {r['converged_s']:.2f} | {r['update_s']:.2f} | "
          f"{r['requests']:,} | {r['moved']:,} | {r['kept_but_stopped']:,} |")
print(f"\n{sys.argv[2]} members, time_boundary {sys.argv[3]} s, ZooKeeper in Docker on the same machine.")
PY
