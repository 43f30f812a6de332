#!/bin/sh
# rocmfleet: what `rocmfleet check` reads of the GPUs' health (rocmfleet/domain/gpuhealth.py parses it).
#
#   gpu-health.sh
#       prints "== ecc amd-smi" and `amd-smi metric --ecc --json` where amd-smi answers; else
#       "== ecc sysfs" and one "cardN BLOCK ue: N" / "cardN BLOCK ce: N" line per counter of
#       amdgpu's RAS files (/sys/class/drm/cardN/device/ras/BLOCK_err_count); else "== ecc none".
#       Then "== kernel" and the kernel log's amdgpu lines since boot of a hang or reset (the
#       patterns of rocmfleet/domain/gpuhealth.py RESET_PATTERN), or "== kernel unreadable: WHY"
#       when neither dmesg nor the journal gives it. Exit 0.
set -u

if command -v amd-smi >/dev/null 2>&1 && out=$(amd-smi metric --ecc --json 2>/dev/null) && [ -n "$out" ]; then
    echo "== ecc amd-smi"
    printf '%s\n' "$out"
else
    found=
    for file in /sys/class/drm/card*/device/ras/*_err_count; do
        [ -r "$file" ] || continue
        if [ -z "$found" ]; then
            echo "== ecc sysfs"
            found=1
        fi
        card=$(echo "$file" | sed -n 's|^/sys/class/drm/\(card[0-9]*\)/.*|\1|p')
        block=$(basename "$file" _err_count)
        sed -n "s/^\(ue\|ce\|de\): *\([0-9]*\).*/$card $block \1: \2/p" "$file"
    done
    [ -n "$found" ] || echo "== ecc none"
fi

resets='amdgpu.*(ring [^ ]+ timeout|GPU reset begin|GPU reset\([0-9]+\)|GPU reset (succeeded|failed)|job timed out|uncorrectable hardware error|GPU hang)'
if log=$(dmesg 2>&1); then
    echo "== kernel"
    printf '%s\n' "$log" | grep -iE "$resets" | tail -n 20
elif log=$(journalctl -k -b 0 --no-pager -q 2>&1) && [ -n "$log" ]; then
    echo "== kernel"
    printf '%s\n' "$log" | grep -iE "$resets" | tail -n 20
else
    echo "== kernel unreadable: $(dmesg 2>&1 | head -n 1)"
fi
exit 0
