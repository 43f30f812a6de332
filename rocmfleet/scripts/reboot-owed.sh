#!/bin/sh
# Reasons this host owes a reboot: the files under $1 (/run/rocmfleet/reboot-required.d, see
# rocmfleet/facts/rocm.py REBOOT_DIR). Prints "state: none" when the directory does not exist
# (nothing recorded since boot: /run is emptied by every boot), else "state: listed" and each
# reason's text. Exits 3 when the directory or a reason in it cannot be read, so that a check
# run without the right to read it is an error, never an empty (passing) answer.
dir=$1
if [ ! -e "$dir" ]; then
    echo "state: none"
    exit 0
fi
if [ ! -d "$dir" ] || [ ! -r "$dir" ] || [ ! -x "$dir" ]; then
    echo "cannot read the directory $dir" >&2
    exit 3
fi
echo "state: listed"
for reason in "$dir"/*; do
    [ -e "$reason" ] || continue
    cat -- "$reason" || exit 3
    echo
done
