#!/usr/bin/env bash
# A/B bench: the worker (`zkp worker`, or an older commit's worker example) at two commits, alternately, on one
# ZooKeeper (BENCHMARKS.md, "A/B against any commit").
#
#   bash bench/ab.sh <ref-A> [<ref-B>]     # B defaults to the working tree, uncommitted changes included
#   bash bench/ab.sh HEAD~1                 # this change against the commit before it
#   bash bench/ab.sh 7c2fb68 HEAD
#
# Every ref is exported (git archive) to ${CARGO_TARGET_DIR:-target}/ab/<commit>/src and its worker (zkp, or the example) built in
# release mode in a target directory of its own, ${CARGO_TARGET_DIR:-target}/ab/<commit>/target (a first run against a
# commit builds its dependencies too, a few minutes; a second run builds nothing). Not one shared target directory:
# every exported tree is the same package to cargo, its artifacts would have the same names, and cargo could hand back
# another commit's binary as fresh. The binaries are found through cargo, never by a fixed path. Then, against ONE
# ZooKeeper container (the image is built locally if missing, never pulled), the two binaries run in alternating order
# (A B, B A, ...), so drift in the machine hits both alike:
#   - warm: one member's allocation over 1,000, 5,000 and 20,000 items on a path whose lock directories exist, from its
#     ALLOCATING line to its ACQUIRED line, minus time_boundary (0.5 s);
#   - join5: 4 members over 1,000 items, then a fifth joins: from its start to all 5 ACQUIRED over a disjoint cover,
#     minus time_boundary (bench/multi.py group);
#   - release / abort: the reaction to a party change, while ACQUIRED and mid-allocation (bench/multi.py react).
# It prints the medians, minimums and the ratio B / A of the medians, with both commits and how busy the CPU was
# before and after; writes bench/results/ab.md and bench/results/ab.jsonl.
#
# Knobs (environment): RUNS (7, warm runs per side and size), SIZES ("1000 5000 20000"), GROUP_RUNS (5), REACT_RUNS (1,
# each of REACT_CYCLES 5 cycles), TIME_BOUNDARY (0.5), KAZOO (1: kazoo 2.11's warm allocation beside, at KAZOO_SIZES
# "1000"), FLOOR (1: the floor beside, at FLOOR_SIZES "1000 5000": a bare client's requests for the same allocation,
# benches/partitioner.rs floor, built from the working tree), ZOOKEEPER_IMAGE (zk-partitioner/zookeeper:3.8).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)

[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: bash bench/ab.sh <ref-A> [<ref-B>]" >&2; exit 2; }
RUNS=${RUNS:-7}
SIZES=${SIZES:-1000 5000 20000}
GROUP_RUNS=${GROUP_RUNS:-5}
REACT_RUNS=${REACT_RUNS:-1}
REACT_CYCLES=${REACT_CYCLES:-5}
TIME_BOUNDARY=${TIME_BOUNDARY:-0.5}
KAZOO=${KAZOO:-1}
KAZOO_SIZES=${KAZOO_SIZES:-1000}
FLOOR=${FLOOR:-1}
FLOOR_SIZES=${FLOOR_SIZES:-1000 5000}
image=${ZOOKEEPER_IMAGE:-zk-partitioner/zookeeper:3.8}
# shellcheck source=bench/machine.sh
. bench/machine.sh

t0=$(date +%s)
say() { printf '[ab +%4ss] %s\n' "$(( $(date +%s) - t0 ))" "$*" >&2; }

target_root=$(cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
work=$(mktemp -d /tmp/zkp-ab.XXXXXX)
container="zkp-ab-$$"
cleanup() {
    docker rm -f -v "$container" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# shellcheck source=bench/cargo_exe.sh
. bench/cargo_exe.sh
# The worker of the tree in directory $1, built with target directory $2 and copied to $3; sets worker_$4 to the
# command that runs it (`zkp worker`, or an older commit's worker example).
build_worker() {
    local dir=$1 target=$2 out=$3 side=$4 command
    command=$(CARGO_TARGET_DIR=$target worker_command "$dir" "$out") || exit 1
    printf -v "worker_$side" '%s' "$command"
}

# Builds side $1 (A or B) from ref $2 ("" for the working tree); sets label_$1, copies its worker to $work/$1 and
# sets worker_$1.
prepare() {
    local side=$1 ref=$2 commit label
    if [ -z "$ref" ]; then
        commit=$(git rev-parse --short HEAD)
        label="$commit$(git diff --quiet HEAD -- src crates examples Cargo.toml Cargo.lock || echo '+changes')"
        say "building B: the working tree ($label)"
        build_worker "$repo" "$target_root" "$work/$side" "$side"
    else
        commit=$(git rev-parse --short "$ref^{commit}") || { echo "error: $ref is not a commit" >&2; exit 2; }
        label=$commit
        local src="$target_root/ab/$commit/src"
        if [ ! -f "$src/Cargo.toml" ]; then
            rm -rf "$src"; mkdir -p "$src"
            git archive "$commit" | tar -x -C "$src"
            # The export lies inside this repository, whose root is a workspace: a commit from before the workspace
            # would be taken for a member of it. An empty [workspace] table makes the export a workspace of its own.
            grep -q '^\[workspace\]' "$src/Cargo.toml" || printf '\n[workspace]\n' >> "$src/Cargo.toml"
        fi
        say "building $side: $ref ($commit), exported to $src"
        # A target directory per commit: every exported tree is the same package (same name, version and features)
        # to cargo, so in a shared one two commits' artifacts get the same file names, and cargo, finding a
        # commit's fingerprint fresh, would hand back the other commit's binary.
        build_worker "$src" "$target_root/ab/$commit/target" "$work/$side" "$side"
    fi
    printf -v "label_$side" '%s' "$label"
}

prepare A "$1"
prepare B "${2:-}"
if [ "$FLOOR" = 1 ]; then
    say "building the floor probe (benches/partitioner.rs, the working tree)"
    cp "$(cargo_exe partitioner bench --bench partitioner --no-run)" "$work/floor"
fi
[ "$label_A" != "$label_B" ] || say "note: A and B are the same commit ($label_A): an A/A run, for the noise"
# Distinct labels even for an A/A run.
[ "$label_A" != "$label_B" ] || label_B="$label_B'"

say "ZooKeeper image $image"
bash docker/zookeeper/build.sh "$image"
if [ "$KAZOO" = 1 ] && ! python3 -c 'import kazoo' 2>/dev/null; then
    python3 -m pip install --quiet --disable-pip-version-check kazoo==2.11.0 \
        || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages kazoo==2.11.0
fi
python3 -c 'import kazoo' 2>/dev/null || { echo "error: bench/multi.py needs kazoo: pip install kazoo==2.11.0" >&2; exit 1; }

say "starting ZooKeeper ($container)"
docker run -d --rm --name "$container" \
    -e 'ZOO_4LW_COMMANDS_WHITELIST=*' -e ZOO_MAX_CLIENT_CNXNS=0 -e ZOO_TICK_TIME=200 -e 'JVMFLAGS=-Xmx1g' \
    -p 127.0.0.1::2181 "$image" >/dev/null
port=$(docker port "$container" 2181/tcp | head -n1 | sed 's/.*://')
connect="127.0.0.1:$port"
python3 bench/wait_serving.py "$connect" >/dev/null

busy_before=$(cpu_busy_pct)
jsonl="$work/ab.jsonl"
: > "$jsonl"
# One side's command, with its label.
side_label() { if [ "$1" = A ]; then echo "$label_A"; else echo "$label_B"; fi; }
side_worker() { if [ "$1" = A ]; then echo "$worker_A"; else echo "$worker_B"; fi; }
order() { if [ $(( $1 % 2 )) = 1 ]; then echo "A B"; else echo "B A"; fi; }

for n in $SIZES; do
    path="/ab/warm-$n"
    say "warm, $n items: one cold run to make the lock directories, then $RUNS runs per side"
    python3 bench/ab.py warm --worker "$worker_A" --label cold --connect "$connect" --path "$path" --items "$n" \
        --time-boundary "$TIME_BOUNDARY" >/dev/null
    for run in $(seq 1 "$RUNS"); do
        for side in $(order "$run"); do
            python3 bench/ab.py warm --worker "$(side_worker "$side")" --label "$(side_label "$side")" --connect "$connect" \
                --path "$path" --items "$n" --time-boundary "$TIME_BOUNDARY" --run "$run" >> "$jsonl"
        done
    done
    if [ "$FLOOR" = 1 ] && [[ " $FLOOR_SIZES " == *" $n "* ]]; then
        say "the floor, $n items: $RUNS repetitions per batch size"
        "$work/floor" floor --connect "$connect" --path "/ab/floor-$n" --items "$n" --run "$RUNS" >> "$jsonl"
    fi
    if [ "$KAZOO" = 1 ] && [[ " $KAZOO_SIZES " == *" $n "* ]]; then
        say "warm, $n items, kazoo 2.11"
        kpath="/ab/kazoo-warm-$n"
        python3 bench/ab.py warm --impl kazoo --label cold --connect "$connect" --path "$kpath" --items "$n" \
            --time-boundary "$TIME_BOUNDARY" >/dev/null
        for run in $(seq 1 "$RUNS"); do
            python3 bench/ab.py warm --impl kazoo --label kazoo --connect "$connect" --path "$kpath" --items "$n" \
                --time-boundary "$TIME_BOUNDARY" --run "$run" >> "$jsonl"
        done
    fi
done

say "join5: $GROUP_RUNS runs per side"
for run in $(seq 1 "$GROUP_RUNS"); do
    for side in $(order "$run"); do
        python3 bench/multi.py group --impl rust --rust-worker "$(side_worker "$side")" --label "$(side_label "$side")" \
            --connect "$connect" --items 1000 --time-boundary "$TIME_BOUNDARY" --run "$run" \
            --log-dir "$work" >> "$jsonl"
    done
done

say "reaction to a party change: $REACT_RUNS runs of $REACT_CYCLES cycles per side"
for run in $(seq 1 "$REACT_RUNS"); do
    for side in $(order "$run"); do
        python3 bench/multi.py react --impl rust --rust-worker "$(side_worker "$side")" --label "$(side_label "$side")" \
            --connect "$connect" --items 1000 --cycles "$REACT_CYCLES" --time-boundary 0.1 --run "$run" \
            --log-dir "$work" >> "$jsonl"
    done
done
busy_after=$(cpu_busy_pct)

mkdir -p bench/results
cp "$jsonl" bench/results/ab.jsonl
kazoo_flag=""
[ "$KAZOO" = 1 ] && kazoo_flag="--kazoo"
{
    echo "A/B, $(date -u +%Y-%m-%d): A = $label_A ($1), B = $label_B (${2:-the working tree}); $(nproc) cores;"
    echo "CPU busy $busy_before% before, $busy_after% after$(machine_busy "$busy_before" "$busy_after" && echo ' (other work was running: the figures are suspect)');"
    echo "ZooKeeper $image in Docker, -Xmx1g, tickTime 200 ms; time_boundary $TIME_BOUNDARY s; alternating runs."
    echo
    python3 bench/ab.py report --jsonl "$jsonl" --a "$label_A" --b "$label_B" $kazoo_flag
} | tee bench/results/ab.md
