#!/bin/sh
# Secure Boot state and the configured MOK pair (rocmfleet.facts.rocm.SecureBoot):
#   sb: <first line of mokutil --sb-state>   (or "unknown (no mokutil)")
#   key: present|missing, certificate: present|missing, enrolled: <mokutil --test-key line>
# Usage: secure-boot.sh [KEY CERTIFICATE]   (no arguments: no signing pair configured)
if command -v mokutil >/dev/null 2>&1; then
    echo "sb: $(mokutil --sb-state 2>&1 | head -n 1)"
else
    echo "sb: unknown (no mokutil)"
fi
if [ $# -eq 2 ]; then
    if [ -e "$1" ]; then echo "key: present"; else echo "key: missing"; fi
    if [ -e "$2" ]; then
        echo "certificate: present"
        if command -v mokutil >/dev/null 2>&1; then
            echo "enrolled: $(mokutil --test-key "$2" 2>&1 | head -n 1)"
        fi
    else
        echo "certificate: missing"
    fi
fi
exit 0
