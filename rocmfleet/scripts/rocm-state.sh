#!/bin/sh
# What a host has of AMD's two ROCm streams (rocmfleet.facts.rocm.RocmOnHost):
#   file <path>                  for each argument path that exists
#   amdgpu <line> / rocm <line>  the deb lines of amdgpu.list and rocm.list (first two arguments)
#   pkg <name> <status> <ver>    AMD's installed packages (amdgpu*, rocm*, amdrocm*, amd-smi*)
# Usage: rocm-state.sh AMDGPU_LIST ROCM_LIST [OTHER_PATH...]
amdgpu_list="$1"
rocm_list="$2"
for path in "$@"; do
    if [ -e "$path" ]; then echo "file $path"; fi
done
if [ -f "$amdgpu_list" ]; then sed -n 's/^deb /amdgpu deb /p' "$amdgpu_list"; fi
if [ -f "$rocm_list" ]; then sed -n 's/^deb /rocm deb /p' "$rocm_list"; fi
dpkg-query -W -f '${Package} ${db:Status-Abbrev} ${Version}\n' 2>/dev/null \
    | awk '$1 ~ /^(amdgpu|rocm|amdrocm|amd-smi)/ { print "pkg " $0 }'
exit 0
