#!/usr/bin/env bash
# The progress benchmark of BENCHMARKS.md ("Exporting and importing progress"): a shared set of 100,000 items with
# lineage and a 100-byte checkpoint each, exported as one token, imported into an empty path (a move) and back over
# the original (a restore), each RUNS times; against the same nodes read one by one, and a sample created one by one.
#
#   bash bench/progress.sh        # ~5 minutes on 2 cores
#
# It ensures the ZooKeeper image (docker/zookeeper/build.sh: builds it locally if missing, never pulls), builds the
# bench binary in release mode, starts ONE ZooKeeper container (removed on exit), runs benches/progress.rs, prints the
# table and draws bench/results/progress.svg. Knobs (environment): ITEMS (100000), SPLITS (1000), CHECKPOINT_BYTES
# (100), RUNS (3), WRITE_SAMPLE (10000), HEAP (1g), OUT (progress), ZOOKEEPER_IMAGE (zk-partitioner/zookeeper:3.8).
# Output: bench/results/$OUT.jsonl and $OUT.md (the table, with the run's date and commit).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ITEMS=${ITEMS:-100000}
SPLITS=${SPLITS:-1000}
CHECKPOINT_BYTES=${CHECKPOINT_BYTES:-100}
RUNS=${RUNS:-3}
WRITE_SAMPLE=${WRITE_SAMPLE:-10000}
HEAP=${HEAP:-1g}
OUT=${OUT:-progress}
image=${ZOOKEEPER_IMAGE:-zk-partitioner/zookeeper:3.8}

# shellcheck source=bench/cargo_exe.sh
. bench/cargo_exe.sh
# shellcheck source=bench/zookeeper_container.sh
. bench/zookeeper_container.sh
bench=$(cargo_exe progress bench --bench progress --no-run)
start_zookeeper "zkp-progress-$$" "$image" -e "JVMFLAGS=-Xmx$HEAP"

mkdir -p bench/results
out=bench/results/$OUT.jsonl
echo "[progress.sh] $ITEMS items, $SPLITS splits, $CHECKPOINT_BYTES-byte checkpoints, $RUNS runs" >&2
"$bench" --connect "$connect" --items "$ITEMS" --splits "$SPLITS" --checkpoint-bytes "$CHECKPOINT_BYTES" \
    --runs "$RUNS" --write-sample "$WRITE_SAMPLE" | tee "$out" >&2
commit=$(git rev-parse --short HEAD)
if ! git diff --quiet HEAD -- src crates benches; then commit="$commit + uncommitted changes"; fi
python3 - "$out" "$(date -u '+%Y-%m-%d %H:%M UTC')" "$commit" "$HEAP" <<'PY' | tee "bench/results/$OUT.md"
import json, statistics, sys
path, when, commit, heap = sys.argv[1:5]
rows = [json.loads(line) for line in open(path) if line.strip().startswith("{")]
runs = [r for r in rows if r["kind"] == "run"]
base = next(r for r in rows if r["kind"] == "one-by-one")
med = lambda key: statistics.median(r[key] for r in runs)
rng = lambda key: "%.2f / %.2f / %.2f" % (med(key), min(r[key] for r in runs), max(r[key] for r in runs))
r = runs[0]
print("| step | time, median / min / max (s) | requests | nodes |")
print("|---|---:|---:|---:|")
print(f"| export (one token) | {rng('export_s')} | {med('export_requests'):,.0f} | {r['items']:,} items, {r['lineage']:,} lineage, {r['checkpoints']:,} checkpoints |")
print(f"| import into an empty path (a move) | {rng('move_s')} | {med('move_requests'):,.0f} | as exported |")
print(f"| import over the original (a restore) | {rng('restore_s')} | {med('restore_requests'):,.0f} | as exported, the old ones replaced |")
print(f"| the same nodes read one by one | {base['read_s']:.2f} | {base['read_requests']:,} | {base['lineage'] + base['checkpoints']:,} reads and a listing |")
per = base['write_sample_s'] / base['write_sample']
print(f"| checkpoint nodes created one by one | {base['write_sample_s']:.2f} for {base['write_sample']:,} ({per * 1000:.2f} ms each) | {base['write_sample']:,} | a sample of the checkpoints |")
print(f"\nToken: {r['token_bytes']:,} bytes ({r['token_bytes'] / r['items']:.0f} per item) for {r['items']:,} items with "
      f"{r['checkpoint_bytes']}-byte checkpoints. ZooKeeper 3.8 in Docker on the same machine, heap {heap}, "
      f"{len(runs)} runs. Run {when}, crate at {commit}.")
PY
python3 bench/plot.py --from "$out"
