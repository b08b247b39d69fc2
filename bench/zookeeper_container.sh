# Sourced by the bench scripts: one ZooKeeper container of the image `docker/zookeeper/build.sh` makes (never
# pulled), removed when the script exits.
#
#   start_zookeeper NAME IMAGE [docker run options...]   # sets $connect (127.0.0.1:<port>) once it answers `ruok`

start_zookeeper() {
    local name=$1 image=$2 port
    shift 2
    bash docker/zookeeper/build.sh "$image" >&2
    trap 'docker rm -f -v "'"$name"'" >/dev/null 2>&1 || true' EXIT
    docker run -d --rm --name "$name" -e 'ZOO_4LW_COMMANDS_WHITELIST=*' -e ZOO_MAX_CLIENT_CNXNS=0 "$@" \
        -p 127.0.0.1::2181 "$image" >/dev/null
    port=$(docker port "$name" 2181/tcp | head -n1 | sed 's/.*://')
    connect="127.0.0.1:$port"
    for _ in $(seq 1 90); do
        if echo ruok | timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port; cat >&3; cat <&3" 2>/dev/null | grep -q imok; then
            return 0
        fi
        sleep 1
    done
    echo "error: ZooKeeper in container $name did not answer ruok within 90 s" >&2
    return 1
}
