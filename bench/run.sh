#!/usr/bin/env bash
# The benchmark of BENCHMARKS.md: zk-partitioner against kazoo 2.11's SetPartitioner, on one local ZooKeeper.
#
#   bash bench/run.sh            # full run (~15 min on 2 cores): median of 5 runs (fewer for kazoo's big sets)
#   bash bench/run.sh --quick    # smoke check (~2 min): 1 run, 1,000 items only
#
# It ensures the ZooKeeper image (docker/zookeeper/build.sh) and kazoo 2.11 (pip), builds the Rust bench binary and
# zkp in release mode, starts ONE ZooKeeper container (removed on exit), runs every scenario for
# zk-partitioner and for kazoo alternately against it, and writes the tables to stdout and to bench/results/latest.md
# (raw JSON lines: bench/results/latest.jsonl; --quick writes quick.md / quick.jsonl instead), then draws the plots of
# latest.jsonl (bench/plot.py: bench/results/acquired.svg, reaction.svg).
#
# Knobs (environment): RUNS (5), SIZES ("1000 5000 20000"), KAZOO_RUNS_5K (2), KAZOO_RUNS_20K (1), GROUP_RUNS (RUNS),
# REACT_RUNS (2), RUST_CYCLES (12), KAZOO_CYCLES (4), TIME_BOUNDARY (0.1, single member), GROUP_TIME_BOUNDARY (0.5),
# ZOOKEEPER_IMAGE (zk-partitioner/zookeeper:3.8).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

quick=0
case "${1:-}" in
    --quick) quick=1 ;;
    "") ;;
    *) echo "usage: bash bench/run.sh [--quick]" >&2; exit 2 ;;
esac
if [ "$quick" = 1 ]; then
    RUNS=${RUNS:-1}; SIZES=${SIZES:-1000}; KAZOO_RUNS_5K=${KAZOO_RUNS_5K:-1}; KAZOO_RUNS_20K=${KAZOO_RUNS_20K:-1}
    REACT_RUNS=${REACT_RUNS:-1}; RUST_CYCLES=${RUST_CYCLES:-3}; KAZOO_CYCLES=${KAZOO_CYCLES:-1}; name=quick
else
    RUNS=${RUNS:-5}; SIZES=${SIZES:-1000 5000 20000}; KAZOO_RUNS_5K=${KAZOO_RUNS_5K:-2}
    KAZOO_RUNS_20K=${KAZOO_RUNS_20K:-1}; REACT_RUNS=${REACT_RUNS:-2}; RUST_CYCLES=${RUST_CYCLES:-12}
    KAZOO_CYCLES=${KAZOO_CYCLES:-4}; name=latest
fi
GROUP_RUNS=${GROUP_RUNS:-$RUNS}
TIME_BOUNDARY=${TIME_BOUNDARY:-0.1}
GROUP_TIME_BOUNDARY=${GROUP_TIME_BOUNDARY:-0.5}
image=${ZOOKEEPER_IMAGE:-zk-partitioner/zookeeper:3.8}

t0=$(date +%s)
say() { printf '[bench +%4ss] %s\n' "$(( $(date +%s) - t0 ))" "$*" >&2; }

work=$(mktemp -d /tmp/zkp-bench.XXXXXX)
container="zkp-bench-$$"
cleanup() {
    docker rm -f -v "$container" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "ZooKeeper image $image"
bash docker/zookeeper/build.sh "$image"

say "kazoo 2.11 for $(command -v python3)"
if ! python3 -c 'import kazoo.version as v, sys; sys.exit(not v.__version__.startswith("2.11."))' 2>/dev/null; then
    python3 -m pip install --quiet --disable-pip-version-check kazoo==2.11.0 \
        || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages kazoo==2.11.0
fi
kazoo_version=$(python3 -c 'import kazoo.version as v; print(v.__version__)')

say "building the bench binary and zkp (release)"
# shellcheck source=bench/cargo_exe.sh
. bench/cargo_exe.sh
bench_exe=$(cargo_exe partitioner bench --bench partitioner --no-run)
# Private copies: a rebuild in this tree during the run must not swap the binaries under us.
cp "$bench_exe" "$work/partitioner-bench"
worker=$(worker_command . "$work/worker")
bench="$work/partitioner-bench"
revision="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src 2>/dev/null || echo '+uncommitted src changes')"

say "starting ZooKeeper ($container)"
docker run -d --rm --name "$container" \
    -e 'ZOO_4LW_COMMANDS_WHITELIST=*' -e ZOO_MAX_CLIENT_CNXNS=0 -e ZOO_TICK_TIME=200 \
    -p 127.0.0.1::2181 "$image" >/dev/null
port=$(docker port "$container" 2181/tcp | head -n1 | sed 's/.*://')
connect="127.0.0.1:$port"
zk_version=$(python3 bench/wait_serving.py "$connect")
say "ZooKeeper $zk_version serving on $connect"

results="$work/results.jsonl"
: >"$results"
failures=0
record() { # record LABEL COMMAND...: runs one measurement, appends its JSON lines
    local label=$1; shift
    if ! "$@" >>"$results" 2>"$work/last.stderr"; then
        failures=$((failures + 1))
        say "FAILED: $label"; sed 's/^/    /' "$work/last.stderr" >&2
    fi
}
single_pair() { # single_pair IMPL N RUN: a fresh path, then the same path reused; then removed
    local impl=$1 n=$2 run=$3 path="/bench/single-$1-$2-$3"
    local cmd=("$bench")
    [ "$impl" = kazoo ] && cmd=(python3 bench/kazoo_bench.py)
    for mode in fresh reused; do
        record "$impl single n=$n $mode run $run" "${cmd[@]}" single --connect "$connect" --path "$path" \
            --items "$n" --time-boundary "$TIME_BOUNDARY" --mode "$mode" --run "$run"
    done
    "$bench" delete-tree --connect "$connect" --path "$path" || true
}
kazoo_runs() {
    case "$1" in 5000) echo "$KAZOO_RUNS_5K" ;; 20000) echo "$KAZOO_RUNS_20K" ;; *) echo "$RUNS" ;; esac
}
multi=(python3 bench/multi.py --connect "$connect" --bench-bin "$bench" --rust-worker "$worker"
    --log-dir "$work")

say "warm-up (not recorded)"
"$bench" single --connect "$connect" --path /bench/warmup-rust --items 1000 >/dev/null
python3 bench/kazoo_bench.py single --connect "$connect" --path /bench/warmup-kazoo --items 300 >/dev/null
"$bench" delete-tree --connect "$connect" --path /bench

for n in $SIZES; do
    for run in $(seq 1 "$RUNS"); do
        say "1 member, $n items, run $run/$RUNS: zk-partitioner"
        single_pair rust "$n" "$run"
        if [ "$run" -le "$(kazoo_runs "$n")" ]; then
            say "1 member, $n items, run $run/$(kazoo_runs "$n"): kazoo"
            single_pair kazoo "$n" "$run"
        fi
    done
done
for run in $(seq 1 "$GROUP_RUNS"); do
    for impl in rust kazoo; do
        say "4 members + a 5th, run $run/$GROUP_RUNS: $impl"
        record "$impl group run $run" "${multi[@]}" group --impl "$impl" --run "$run" \
            --time-boundary "$GROUP_TIME_BOUNDARY"
    done
done
for run in $(seq 1 "$REACT_RUNS"); do
    say "reaction to party changes, run $run/$REACT_RUNS: zk-partitioner ($RUST_CYCLES cycles)"
    record "rust react run $run" "${multi[@]}" react --impl rust --run "$run" --cycles "$RUST_CYCLES"
    say "reaction to party changes, run $run/$REACT_RUNS: kazoo ($KAZOO_CYCLES cycles)"
    record "kazoo react run $run" "${multi[@]}" react --impl kazoo --run "$run" --cycles "$KAZOO_CYCLES"
done

# How the server's write path behaved over the whole run (every write waits for a group commit and its fsync).
server=$(python3 - "$connect" <<'PY'
import sys
sys.path.insert(0, "bench")
from kazoo_bench import mntr
m = mntr(sys.argv[1])
q = "zk_%s_sync_processor_queue_and_flush_time_ms"
print("ZooKeeper's write path over the run: fsync avg %.1f ms, max %s ms; a write's wait for its group commit "
      "(queue + flush) p50 %s ms, p99 %s ms, max %s ms." % (float(m["zk_avg_fsynctime"]), m["zk_max_fsynctime"],
                                                             m[q % "p50"], m[q % "p99"], m[q % "max"]))
PY
) || server=""
elapsed=$(( $(date +%s) - t0 ))
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
machine="Run $(date -u '+%Y-%m-%d %H:%M UTC'), ${elapsed} s in all; crate at ${revision}. Machine: $(nproc) × ${cpu}, \
$(free -g | awk '/^Mem:/ {print $2}') GB RAM, Linux $(uname -r), load average at the end $(cut -d' ' -f1-3 /proc/loadavg). \
ZooKeeper ${zk_version} (image ${image}, standalone, tickTime 200 ms, in Docker on the same machine), kazoo ${kazoo_version} \
on Python $(python3 -c 'import platform; print(platform.python_version())'), $(rustc --version | cut -d' ' -f1-2). \
time_boundary ${TIME_BOUNDARY} s (1 member), ${GROUP_TIME_BOUNDARY} s (4-5 members); runs: ${RUNS} (kazoo: \
$(for n in $SIZES; do printf '%s at %s items, ' "$(kazoo_runs "$n")" "$n"; done | sed 's/, $//')); \
reaction: ${REACT_RUNS} × ${RUST_CYCLES} cycles (zk-partitioner), ${REACT_RUNS} × ${KAZOO_CYCLES} (kazoo). ${server}"

mkdir -p bench/results
cp "$results" "bench/results/$name.jsonl"
title="zk-partitioner vs kazoo 2.11"
if [ "$quick" = 1 ]; then title="$title (quick smoke run: 1 run, not for comparison)"; fi
python3 bench/report.py "bench/results/$name.jsonl" --title "$title" --machine "$machine" \
    | tee "bench/results/$name.md"
say "tables written to bench/results/$name.md ($failures failed measurements)"
# The plots of these JSON lines (latest.jsonl: bench/results/acquired.svg and reaction.svg; see bench/plot.py --list).
python3 bench/plot.py --from "bench/results/$name.jsonl"
[ "$failures" = 0 ]
