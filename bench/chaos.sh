#!/usr/bin/env bash
# The chaos run of RELIABILITY.md ("The chaos run"), with its figures kept: tests/chaos.rs in release mode with
# CHAOS_JSON, then the plot of the recovery time after each fault kind.
#
#   CHAOS_FAULTS=100 CHAOS_SEED=7 bash bench/chaos.sh     # ~5 minutes on 2 cores once built
#   CHAOS_FAULTS=1000 CHAOS_SEED=7 bash bench/chaos.sh    # the long run: ~35 minutes
#
# It builds zkp and the chaos test in release mode and runs private copies of them (a rebuild in the tree during the
# run cannot swap them; the test runs the zkp $ZKP names), from the
# repository's root, with CHAOS_JSON. It writes bench/results/$OUT.jsonl (one JSON line per fault: kind, recovery
# seconds, the liveness bound, seed), bench/results/$OUT.md (the run's line: date, commit, machine; and the test's
# summary table) and, through bench/plot.py, bench/results/$OUT.svg. The test starts its own ZooKeeper container.
#
# Knobs (environment): CHAOS_FAULTS (100), CHAOS_SEED (7), OUT (chaos), MACHINE_NOTE (a sentence added to the run's
# line, e.g. what else the machine was doing), ZK_TEST_TIME_SCALE (the test kit's deadlines scaled, for a busy
# machine; noted in the run's line).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

case "${1:-}" in
    "") ;;
    *) echo "usage: CHAOS_FAULTS=100 CHAOS_SEED=7 bash bench/chaos.sh   (knobs: CHAOS_FAULTS, CHAOS_SEED, OUT)" >&2
       exit 2 ;;
esac
CHAOS_FAULTS=${CHAOS_FAULTS:-100}
CHAOS_SEED=${CHAOS_SEED:-7}
OUT=${OUT:-chaos}

t0=$(date +%s)
say() { printf '[chaos.sh +%4ss] %s\n' "$(( $(date +%s) - t0 ))" "$*" >&2; }
source bench/machine.sh  # cpu_busy_pct, machine_busy, measured_revision

work=$(mktemp -d /tmp/zkp-chaos.XXXXXX)
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

# What is measured: HEAD plus any uncommitted change to the library, the worker or the tests (noted before building).
revision=$(measured_revision src crates tests Cargo.toml)

say "building zkp and the chaos test (release)"
# shellcheck source=bench/cargo_exe.sh
. bench/cargo_exe.sh
zkp_exe=$(cargo_exe zkp build --release -p zk-partitioner-cli --bin zkp)
chaos_exe=$(cargo_exe chaos test --release -p zk-partitioner-cli --test chaos --no-run)
mkdir -p "$work/release/deps"
cp "$zkp_exe" "$work/release/zkp"
cp "$chaos_exe" "$work/release/deps/chaos"
# The test runs the zkp named by $ZKP: the private copy.
export ZKP="$work/release/zkp"

busy_start=$(cpu_busy_pct)
start=$(date -u '+%Y-%m-%d %H:%M')
say "chaos: $CHAOS_FAULTS faults, seed $CHAOS_SEED (the log: $work/chaos.log)"
set +e
CHAOS_FAULTS=$CHAOS_FAULTS CHAOS_SEED=$CHAOS_SEED CHAOS_JSON="$work/chaos.jsonl" \
    "$work/release/deps/chaos" --exact chaos --nocapture 2>&1 | tee "$work/chaos.log" >&2
status=${PIPESTATUS[0]}
set -e
end=$(date -u '+%H:%M')
busy_end=$(cpu_busy_pct)
elapsed=$(( $(date +%s) - t0 ))

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
busy=""
if machine_busy "$busy_start" "$busy_end"; then
    busy=" The machine was busy with other work (CPU in use before or after the run), so recovery times are inflated."
fi
mkdir -p bench/results
cp "$work/chaos.jsonl" "bench/results/$OUT.jsonl"
{
    echo "### Chaos run: CHAOS_FAULTS=$CHAOS_FAULTS CHAOS_SEED=$CHAOS_SEED"
    echo
    echo "Run $start-$end UTC, ${elapsed} s in all (build included); crate at ${revision}. Machine: $(nproc) × ${cpu}, \
$(free -g | awk '/^Mem:/ {print $2}') GB RAM, Linux $(uname -r); CPU in use before the run ${busy_start}%, after it \
${busy_end}%.${busy} $(rustc --version | cut -d' ' -f1-2), release build\
${ZK_TEST_TIME_SCALE:+, the test kit deadlines scaled by ZK_TEST_TIME_SCALE=$ZK_TEST_TIME_SCALE}.${MACHINE_NOTE:+ $MACHINE_NOTE}"
    echo
    sed -n '/^chaos summary/,$p' "$work/chaos.log" | grep -E '^(chaos summary|\||safety samples)' || true
} | tee "bench/results/$OUT.md"
python3 bench/plot.py --from "bench/results/$OUT.jsonl"
say "written bench/results/$OUT.jsonl and $OUT.md ($(wc -l <"bench/results/$OUT.jsonl") faults)"
[ "$status" = 0 ] || { say "the chaos test failed (exit $status): see the log above"; exit 1; }
