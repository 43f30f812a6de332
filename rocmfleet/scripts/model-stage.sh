#!/bin/sh
# rocmfleet: have a Hugging Face model's revision in this host's cache, once, before any vLLM
# instance starts (rocmfleet.domain.hfmodel). The instances mount the cache read-only and read it
# offline (HF_HUB_OFFLINE=1), so nothing else ever writes there.
#
#   model-stage.sh CACHE_DIR MODEL REVISION IMAGE SECRETS_FILE [EXCLUDE...]
#
#   CACHE_DIR     the host's cache (vllm_hf_cache_dir), mounted at /root/.cache/huggingface
#   MODEL         the hub id, org/name
#   REVISION      a commit (40 hex), or a branch (main) for an unpinned profile
#   IMAGE         the image whose own `hf download` (huggingface_hub >= 0.34) or
#                 `huggingface-cli download` fetches it: the instances' image, by digest
#   SECRETS_FILE  `docker run --env-file` with the secrets (HF_TOKEN): the token reaches the
#                 container's environment, never an argument of any process
#   EXCLUDE       `--exclude` glob patterns (original/*: Meta's consolidated .pth copies)
#
# Staged means: the stamp CACHE_DIR/rocmfleet-staged/models--ORG--NAME/REVISION exists and so
# does the revision in huggingface_hub's layout (hub/models--ORG--NAME/snapshots/COMMIT, or
# refs/BRANCH). The stamp is written only after the download exited 0. When staged: prints
# "staged ..." and exits 0 without starting a container. Otherwise, under an exclusive lock
# (flock(1) on CACHE_DIR/rocmfleet-staged/models--ORG--NAME/.lock: hosts sharing the cache on
# NFS wait for the one downloading, then find it staged) it downloads and writes the stamp.
#
# Exit 0 staged; 1 the download failed or left no snapshot (one line on stderr: why, with the
# downloader's last line); 2 usage.
set -u

if [ $# -lt 5 ]; then
    echo "usage: model-stage.sh CACHE_DIR MODEL REVISION IMAGE SECRETS_FILE [EXCLUDE...]" >&2
    exit 2
fi
cache=$1 model=$2 revision=$3 image=$4 secrets=$5
shift 5

folder="models--$(printf '%s' "$model" | sed 's|/|--|g')"
stamps="$cache/rocmfleet-staged/$folder"
stamp="$stamps/$revision"
case $revision in
    *[!0-9a-f]*) present="$cache/hub/$folder/refs/$revision" ;;
    *) present="$cache/hub/$folder/snapshots/$revision" ;;
esac

staged() {
    [ -f "$stamp" ] && [ -e "$present" ]
}

if staged; then
    echo "staged $model@$revision in $cache"
    exit 0
fi

mkdir -p "$stamps" || exit 1
# The lock is held by this shell's descriptor 9 until it exits.
exec 9>"$stamps/.lock" || exit 1
flock 9 || {
    echo "rocmfleet: model-stage: cannot lock $stamps/.lock" >&2
    exit 1
}
if staged; then
    echo "staged $model@$revision in $cache (by another host sharing it)"
    exit 0
fi

log=$(mktemp) || exit 1
trap 'rm -f "$log"' EXIT
# sh -c: positional parameters are the model, the revision and the patterns, never expanded by a
# shell on the host. `hf` first (huggingface_hub 0.34+, the only CLI of 1.0+), else the older name.
# HF_HUB_OFFLINE=0: an image may set it (an air-gapped build, the lab's); this one container must
# reach the Hub (huggingface_hub/constants.py reads HF_HUB_OFFLINE from the environment).
# shellcheck disable=SC2016 # expanded by the container's shell
inner='model=$1 revision=$2
shift 2
for pattern in "$@"; do set -- "$@" --exclude "$pattern"; shift; done
if command -v hf >/dev/null 2>&1; then cli=hf; else cli=huggingface-cli; fi
exec "$cli" download "$model" --revision "$revision" "$@"'
docker run --rm --network host \
    --env-file "$secrets" \
    --env HF_HUB_CACHE=/root/.cache/huggingface/hub \
    --env HF_HUB_OFFLINE=0 \
    --env HF_HUB_DISABLE_PROGRESS_BARS=1 \
    --volume "$cache:/root/.cache/huggingface" \
    --entrypoint sh \
    "$image" -c "$inner" model-stage "$model" "$revision" "$@" >"$log" 2>&1
rc=$?
if [ "$rc" -ne 0 ]; then
    last=$(grep -v '^[[:space:]]*$' "$log" | tail -n 1)
    echo "rocmfleet: model-stage: downloading $model@$revision into $cache failed (exit $rc): ${last:-no output}" >&2
    exit 1
fi
if [ ! -e "$present" ]; then
    echo "rocmfleet: model-stage: the download of $model@$revision exited 0 but $present is missing" >&2
    exit 1
fi
date -u +%Y-%m-%dT%H:%M:%SZ >"$stamp" || exit 1
echo "staged $model@$revision in $cache (downloaded)"
exit 0
