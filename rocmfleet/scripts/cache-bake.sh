#!/bin/sh
# rocmfleet: host-side steps of `rocmfleet cache bake` (rocmfleet/fleet/cache/cachebake.py drives them).
#
#   cache-bake.sh prepare DIR NAME...
#       remove DIR and create DIR/NAME for each NAME, empty (the caches the bake container fills).
#   cache-bake.sh stop UNIT
#       stop UNIT if it is active; prints "active" or "inactive" (what it was), for `resume`.
#   cache-bake.sh resume UNIT WAS
#       start UNIT again when WAS is "active"; always exits 0 after trying (the message says).
#   cache-bake.sh facts IMAGE
#       what is inside IMAGE: "rocm=<version>" (/opt/rocm/.info/version) and "vllm=<version>"
#       (python3 -c 'import vllm'), one per line; empty values when not found.
#   cache-bake.sh list DIR
#       one line per file under DIR: "<size in bytes><TAB><path relative to DIR>", sorted by path;
#       then a last line "checksum<TAB><sha256>": the sha256 of `sha256sum` over every file in
#       path order (content only: modification times and owners do not change it).
#   cache-bake.sh pack DIR OUT NAME=PATH...
#       write the tar archive OUT holding DIR/NAME at PATH (absolute, inside the image) for each
#       pair: the image layer (Dockerfile `ADD OUT /` unpacks it at /). OUT's directory (the build
#       context) is created when missing. Files are sorted by name, owned by 0:0; modification
#       times are kept. Prints OUT's sha256.
#   cache-bake.sh dockerfile DIR TEXT
#       write TEXT to DIR/Dockerfile.
#   cache-bake.sh build DIR REF
#       docker build -t REF DIR, docker push REF; prints the pushed "repository@sha256:..." digest.
#   cache-bake.sh clean DIR
#       remove DIR.
#
# Arguments are data: nothing here is generated, and no secret is passed on a command line.
set -eu

mode=${1:-}
[ $# -gt 0 ] && shift

case "$mode" in
prepare)
    dir=$1
    shift
    rm -rf "$dir"
    for name in "$@"; do
        mkdir -p "$dir/$name"
    done
    ;;
stop)
    unit=$1
    if systemctl is-active --quiet "$unit"; then
        systemctl stop "$unit"
        echo active
    else
        echo inactive
    fi
    ;;
resume)
    unit=$1 was=$2
    if [ "$was" = active ]; then
        systemctl start "$unit" || echo "cache-bake: could not start $unit again" >&2
    fi
    ;;
facts)
    image=$1
    docker run --rm --entrypoint /bin/sh "$image" -c \
        'printf "rocm=%s\n" "$(cat /opt/rocm/.info/version 2>/dev/null | head -n 1)";
         printf "vllm=%s\n" "$(python3 -c "import vllm; print(vllm.__version__)" 2>/dev/null)"'
    ;;
list)
    dir=$1
    cd "$dir"
    find . -type f -printf '%s\t%P\n' | LC_ALL=C sort -t "$(printf '\t')" -k2
    sum=$(find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum | sha256sum | cut -d' ' -f1)
    printf 'checksum\t%s\n' "$sum"
    ;;
pack)
    dir=$1 out=$2
    shift 2
    names=
    for pair in "$@"; do
        name=${pair%%=*} path=${pair#*=}
        path=${path#/}
        names="$names $name"
        set -- "$@" --transform "s,^$name/,$path/," --transform "s,^$name\$,$path,"
        shift
    done
    mkdir -p "$(dirname "$out")"
    # shellcheck disable=SC2086 # $names: the layout's names, words by design
    tar -C "$dir" --sort=name --owner=0 --group=0 --numeric-owner -cf "$out" "$@" $names
    sha256sum "$out" | cut -d' ' -f1
    ;;
dockerfile)
    dir=$1 text=$2
    mkdir -p "$dir"
    printf '%s' "$text" >"$dir/Dockerfile"
    ;;
build)
    dir=$1 ref=$2
    docker build --quiet -t "$ref" "$dir" >&2
    docker push "$ref" >&2
    docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$ref" |
        grep -F "${ref%:*}@" | head -n 1
    ;;
clean)
    rm -rf "$1"
    ;;
*)
    echo "usage: cache-bake.sh prepare|stop|resume|facts|list|pack|dockerfile|build|clean ARGS (see the script)" >&2
    exit 2
    ;;
esac
