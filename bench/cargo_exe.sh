# Sourced by the bench scripts: where cargo put a binary, from cargo's own report of the build, so that
# CARGO_TARGET_DIR (or any configured target directory) is honoured and no path is assumed.
#
#   worker=$(cargo_exe worker build --release --example worker)
#   bench=$(cargo_exe partitioner bench --bench partitioner --no-run)

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
