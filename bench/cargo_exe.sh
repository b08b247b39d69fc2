# Sourced by the bench scripts: where cargo put a binary, from cargo's own report of the build, so that
# CARGO_TARGET_DIR (or any configured target directory) is honoured and no path is assumed.
#
#   zkp=$(cargo_exe zkp build --release -p zk-partitioner-cli --bin zkp)
#   bench=$(cargo_exe partitioner bench --bench partitioner --no-run)
#   worker=$(worker_command . "$work/worker")     # the command that runs one member: "$work/worker worker"

# cargo_exe <target name> <cargo arguments...>: runs cargo with them and prints the executable built for that target.
cargo_exe() {
    local name=$1 exe
    shift
    exe=$(cargo "$@" --message-format=json | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])' "$name" | tail -n1)
    if [ -z "$exe" ] || [ ! -x "$exe" ]; then
        echo "error: cargo $* built no executable named $name" >&2
        return 1
    fi
    echo "$exe"
}

# worker_command <source tree> <copy to>: builds the worker of the tree in <source tree> in release mode (in
# CARGO_TARGET_DIR if set), copies it to <copy to>, and prints the command that runs one member: `<copy> worker` for
# `zkp` (crates/cli), `<copy>` alone for the worker example of a tree from before the tool had a crate (bench/ab.sh
# builds older commits). The benchmarks' Python scripts take that command as --rust-worker / --worker.
worker_command() {
    local dir=$1 out=$2 exe
    if [ -f "$dir/crates/cli/Cargo.toml" ]; then
        exe=$(cd "$dir" && cargo_exe zkp build --release -p zk-partitioner-cli --bin zkp) || return 1
        cp "$exe" "$out" && printf '%q worker\n' "$out"
    else
        exe=$(cd "$dir" && cargo_exe worker build --release --example worker) || return 1
        cp "$exe" "$out" && printf '%q\n' "$out"
    fi
}
