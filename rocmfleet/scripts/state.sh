#!/bin/sh
# rocmfleet: what a role manages on this host, read in one command (rocmfleet.facts.state.HostState).
#
#   state.sh ITEM...   where each ITEM is a KIND and its VALUE (two arguments):
#     path PATH        type (file, dir, link, missing, other), mode (octal), owner, group, gid
#                      and, for a regular file, its SHA-256
#     glob GLOB        `path` of every existing path matching GLOB (none when nothing matches)
#     unit UNIT        LoadState, ActiveState and UnitFileState (all units in one `systemctl show`)
#     pkg NAME         dpkg status and version (all packages in one `dpkg-query`; NAME may be one of
#                      its patterns, linux-tools-*); none if unknown
#     sysctl KEY       the live value and whether it can be written here (/proc/sys); null if absent
#     os -             ID, VERSION_ID, VERSION_CODENAME of /etc/os-release and `uname -r`
#     image REF        the local image's id (Docker's API, else `docker image inspect`); null if absent
#     marker TEXT      the first line that `marked` looks for (set before `marked`)
#     marked GLOB      every regular file matching GLOB whose first line holds the marker
#     probe TEXT       the text of vllm-probe.sh, which `ready` runs
#     text PATH        every line of PATH, in order (nothing for a missing file: `path` says so)
#     script TEXT      a shell script, which the next `run` runs
#     run NAME         every line the script prints (`sh -c` under `timeout 20`), in order, then
#                      its exit status, under NAME
#   and one ITEM of three or more arguments:
#     ready KEY N ARG1..ARGN   the exit status of `vllm-probe.sh ARG1..ARGN` under KEY (ARG1 is
#                              the probe's mode: `live` or `ready`)
#
# Prints one JSON object per line, then {"kind": "end"} (output without it was cut short);
# exit 0. Nothing here changes the host.
set -u

# A JSON string body: backslashes and quotes escaped, control characters dropped.
js() {
    printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' | tr -d '\000-\037'
}

# js's answer in $J, without starting a process for a string that needs no escaping (a path,
# a unit, a mode, a user: nearly every string here; a host reads dozens per converge, issue 16).
jsv() {
    case $1 in
        *[!A-Za-z0-9._/@:+=,%~\ -]*) J=$(js "$1") ;;
        *) J=$1 ;;
    esac
}

# One JSON object on a line: KIND, then NAME VALUE pairs (each value a JSON string).
object() {
    line="{\"kind\":\"$1\""
    shift
    while [ $# -ge 2 ]; do
        jsv "$2"
        line="$line,\"$1\":\"$J\""
        shift 2
    done
    printf '%s}\n' "$line"
}

# awk's esc(S): S as the body of a JSON string: backslashes and quotes escaped, tabs as \t, other
# control characters (NUL and newline included) dropped. Replacements are made by split and join,
# not gsub, whose backslashes in the replacement differ between mawk and gawk.
AWK_ESC='
    function rep(s, from, to,    n, parts, i, out) {
        n = split(s, parts, from)
        out = parts[1]
        for (i = 2; i <= n; i++) out = out to parts[i]
        return out
    }
    function esc(s) {
        s = rep(rep(rep(s, "\\", "\\\\"), "\"", "\\\""), "\t", "\\t")
        gsub(/[\000-\010\012-\037]/, "", s)
        return s
    }
'

# json_lines KIND KEY: each line of stdin as {"kind":KIND,"key":KEY,"text":LINE} (esc); a last line
# without a newline ends like the others. One awk process (a file read per item costs the host a
# process, not six: issue 16).
json_lines() {
    RF_KIND=$1 RF_KEY=$2 awk "$AWK_ESC"'
        BEGIN { head = "{\"kind\":\"" ENVIRON["RF_KIND"] "\",\"key\":\"" esc(ENVIRON["RF_KEY"]) "\",\"text\":\"" }
        { printf "%s%s\"}\n", head, esc($0) }
    '
}

# GET PATH of Docker's Engine API over its default socket with curl: a few milliseconds, where a
# call of Docker's CLI costs about 25 (its start). Fails where the socket is not the default one
# (DOCKER_HOST set, no socket, no curl) or Docker answers an error: the caller then asks the CLI.
docker_api() {
    [ -z "${DOCKER_HOST:-}" ] && [ -S /var/run/docker.sock ] && command -v curl >/dev/null 2>&1 &&
        curl -fsS -m 10 --unix-socket /var/run/docker.sock "http://localhost/$1" 2>/dev/null
}

# The type of path $1 in $kind (link, dir, file, other), without a process; a missing path is
# printed at once and $kind left empty.
path_type() {
    if [ -L "$1" ]; then
        kind='link'
    elif [ -d "$1" ]; then
        kind='dir'
    elif [ -f "$1" ]; then
        kind='file'
    elif [ -e "$1" ]; then
        kind='other'
    else
        kind=''
        jsv "$1"
        printf '{"kind":"path","path":"%s","type":"missing"}\n' "$J"
    fi
}

path_item() {
    p=$1
    path_type "$p"
    [ -n "$kind" ] || return 0
    jsv "$p"
    pj=$J
    # "-": unknown (never a glob character: `set -- $meta` splits it before `set -f`)
    meta=$(stat -c '%a %U %G %g' "$p" 2>/dev/null) || meta="- - - -"
    sum=
    if [ "$kind" = file ]; then
        # From stdin: for a file name holding a backslash, sha256sum prefixes its line with one.
        # Its line is the sum, then " -": the first word.
        sum=$(sha256sum <"$p" 2>/dev/null) && sum=${sum%% *} || sum=
    fi
    # shellcheck disable=SC2086 # four words, split on purpose
    set -- $meta
    jsv "$2"
    user=$J
    jsv "$3"
    printf '{"kind":"path","path":"%s","type":"%s","mode":"%s","user":"%s","group":"%s","gid":"%s","sha256":"%s"}\n' \
        "$pj" "$kind" "$1" "$user" "$J" "$4" "$sum"
}

nl='
'
# "TYPE PATH" lines of the existing paths that path_flush reads, in two processes for all of them
# (one `stat`, one `sha256sum`) rather than two per path: a converge asks about forty (issue 43).
pending=

# path_item's answer, later: a missing path at once (no process), an existing one into `pending`;
# a name holding a newline, which a line cannot carry, at once through path_item.
path_add() {
    case $1 in
        *"$nl"*)
            path_item "$1"
            return
            ;;
    esac
    path_type "$1"
    if [ -n "$kind" ]; then pending="$pending$kind $1$nl"; fi
}

# Every pending path as path_item prints it. Where `stat` or `sha256sum` fails for one of them
# (it went away or cannot be read since path_add looked), every path goes through path_item.
path_flush() {
    [ -n "$pending" ] || return 0
    metas=$(printf '%s' "$pending" | cut -d ' ' -f 2- | xargs -d '\n' stat -c '%a %U %G %g' -- 2>/dev/null) &&
        sums=$(printf '%s' "$pending" | sed -n 's/^file //p' | xargs -r -d '\n' sha256sum -- 2>/dev/null)
    ok=$?
    set -f
    old_ifs=$IFS
    IFS=$nl
    # shellcheck disable=SC2086 # one "TYPE PATH" line per word, split on newlines on purpose
    set -- $pending
    IFS=$old_ifs
    set +f
    if [ "$ok" -ne 0 ]; then
        for entry in "$@"; do path_item "${entry#* }"; done
        return 0
    fi
    metas="$metas$nl"
    sums="$sums$nl"
    for entry in "$@"; do
        kind=${entry%% *}
        jsv "${entry#* }"
        pj=$J
        meta=${metas%%"$nl"*}
        metas=${metas#*"$nl"}
        sum=
        if [ "$kind" = file ]; then
            # "SUM  NAME", or "\SUM  NAME" for a name sha256sum escapes
            sum=${sums%%"$nl"*}
            sums=${sums#*"$nl"}
            sum=${sum#\\}
            sum=${sum%% *}
        fi
        mode=${meta%% *}
        meta=${meta#* }
        jsv "${meta%% *}"
        user=$J
        meta=${meta#* }
        jsv "${meta%% *}"
        printf '{"kind":"path","path":"%s","type":"%s","mode":"%s","user":"%s","group":"%s","gid":"%s","sha256":"%s"}\n' \
            "$pj" "$kind" "$mode" "$user" "$J" "${meta#* }" "$sum"
    done
}

# Every run's output: after a line "$run_mark N" (a line no program prints: a control character
# and this process's ID), the lines of the run whose name is $RF_RUN_N; then its "ran" line.
run_mark="$(printf '\001')rocmfleet-run $$"
nruns=0
run_lines=
run_status=

# The runs' lines as json_lines prints them, in one awk process rather than one per run (a
# converge asks a dozen runs: issue 43), then their "ran" lines, which follow their output.
run_flush() {
    if [ -n "$run_lines" ]; then
        printf '%s' "$run_lines" | RF_MARK="$run_mark" awk "$AWK_ESC"'
            BEGIN { mark = ENVIRON["RF_MARK"] " " }
            index($0, mark) == 1 {
                head = "{\"kind\":\"run\",\"key\":\"" esc(ENVIRON["RF_RUN_" substr($0, length(mark) + 1)]) "\",\"text\":\""
                next
            }
            { printf "%s%s\"}\n", head, esc($0) }
        '
    fi
    printf '%s' "$run_status"
}

units=
packages=
marker=
probe=
script=
while [ $# -ge 2 ]; do
    kind=$1 value=$2
    shift 2
    case $kind in
        path) path_add "$value" ;;
        glob)
            for f in $value; do
                if [ -e "$f" ] || [ -L "$f" ]; then path_add "$f"; fi
            done
            ;;
        unit) units="$units $value" ;;
        pkg) packages="$packages $value" ;;
        sysctl)
            # /proc/sys as rocmfleet.facts.tuning.SysctlLive reads it: read-only in a container.
            f=/proc/sys/$(printf '%s' "$value" | tr . /)
            if [ -e "$f" ] && v=$(cat "$f" 2>/dev/null); then
                w=false
                if [ -w "$f" ]; then w=true; fi
                jsv "$v"
                v=$J
                jsv "$value"
                printf '{"kind":"sysctl","key":"%s","value":"%s","writable":%s}\n' "$J" "$v" "$w"
            else
                jsv "$value"
                printf '{"kind":"sysctl","key":"%s","value":null,"writable":false}\n' "$J"
            fi
            ;;
        os)
            # /etc/os-release (os-release(5)) and the running kernel; VALUE is ignored.
            (
                ID='' VERSION_ID='' VERSION_CODENAME=''
                # shellcheck disable=SC1091 # the host's file, read at run time
                if [ -r /etc/os-release ]; then . /etc/os-release; fi
                object os id "$ID" version_id "$VERSION_ID" codename "$VERSION_CODENAME" kernel "$(uname -r)"
            )
            ;;
        image)
            # the API's answer starts with the image's "Id" (the first field of its ImageInspect)
            id=$(docker_api "images/$value/json" | sed -n 's/^{"Id":"\([^"]*\)".*/\1/p')
            if [ -n "$id" ] || id=$(docker image inspect --format '{{.Id}}' "$value" 2>/dev/null); then
                object image image "$value" id "$id"
            else
                printf '{"kind":"image","image":"%s","id":null}\n' "$(js "$value")"
            fi
            ;;
        marker) marker=$value ;;
        marked)
            for f in $value; do
                [ -f "$f" ] || continue
                case $(head -n 1 "$f") in
                    *"$marker"*) object marked glob "$value" path "$f" ;;
                esac
            done
            ;;
        probe) probe=$value ;;
        text)
            # awk ends a last line that has no newline
            # shellcheck disable=SC2094 # the second argument is the key, not a file written to
            if [ -f "$value" ]; then json_lines text "$value" <"$value"; fi
            ;;
        script) script=$value ;;
        run)
            out=$(timeout 20 sh -c "$script" 2>/dev/null)
            rc=$?
            # its lines and its status, printed by run_flush after every item (one awk for all runs)
            nruns=$((nruns + 1))
            export "RF_RUN_$nruns=$value"
            if [ -n "$out" ]; then run_lines="$run_lines$run_mark $nruns$nl$out$nl"; fi
            jsv "$value"
            run_status="$run_status{\"kind\":\"ran\",\"key\":\"$J\",\"rc\":$rc}$nl"
            ;;
        ready)
            count=$1
            shift
            key=$value
            (
                # Keep the probe's own arguments, the next COUNT ones, as "$@".
                n=$# i=0
                for a in "$@"; do
                    i=$((i + 1))
                    if [ "$i" -le "$count" ]; then set -- "$@" "$a"; fi
                done
                shift "$n"
                sh -c "$probe" vllm-probe.sh "$@" >/dev/null 2>&1
                rc=$?
                printf '{"kind":"ready","key":"%s","rc":%d}\n' "$(js "$key")" "$rc"
            )
            shift "$count"
            ;;
        *) printf '{"kind":"error","message":"unknown item kind %s"}\n' "$(js "$kind")" ;;
    esac
done

path_flush
run_flush

# Unit and package names are words, not file globs (a package may be a dpkg-query pattern).
set -f
if [ -n "$units" ]; then
    # One call for every unit: blocks of Key=Value lines, a blank line between units.
    # shellcheck disable=SC2086 # unit names, split on purpose
    systemctl show -p Id -p LoadState -p ActiveState -p UnitFileState $units 2>/dev/null | {
        id='' load='' active='' enabled=''
        emit() {
            if [ -n "$id" ]; then
                object unit unit "$id" load "$load" active "$active" enabled "$enabled"
            fi
            id='' load='' active='' enabled=''
        }
        while IFS= read -r line; do
            case $line in
                Id=*) id=${line#Id=} ;;
                LoadState=*) load=${line#LoadState=} ;;
                ActiveState=*) active=${line#ActiveState=} ;;
                UnitFileState=*) enabled=${line#UnitFileState=} ;;
                "") emit ;;
            esac
        done
        emit
    }
fi

if [ -n "$packages" ]; then
    # shellcheck disable=SC2086 # package names, split on purpose
    dpkg-query -W -f '${Package}\t${db:Status-Abbrev}\t${Version}\n' $packages 2>/dev/null \
        | while IFS="$(printf '\t')" read -r name status version; do
            object pkg package "$name" status "$status" version "$version"
        done
fi

echo '{"kind":"end"}'
exit 0
