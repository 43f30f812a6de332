# rocmfleet lab stand-in: sourced into the stand-in amdgpu-dkms's preinst and prerm
# (tests/lab/amdrepo.py). A real driver change unloads amdgpu, which fails while a process holds
# the GPUs ("modprobe: FATAL: Module amdgpu is in use."): AMD's GPU agent (gpuagent.service of the
# metrics exporter) does, so AMD documents stopping it first (ROCm/device-metrics-exporter
# docs/installation/deb-package.rst, "Service Management for Driver and Partition Operations").
#
# driver_change SCRIPT ARG...: append one line to the lab's driver-change log (UTC time, package,
# maintainer script and its arguments, the state of both units), then fail while gpuagent.service
# is active and the change replaces or removes an installed driver (not on a first install).
driver_change() {
    log=${ROCMFLEET_LAB_DRIVER_LOG:-/var/log/rocmfleet-lab/driver-changes.log}
    mkdir -p "$(dirname "$log")"
    agent=$(systemctl is-active gpuagent.service 2>/dev/null) || true
    exporter=$(systemctl is-active amd-metrics-exporter.service 2>/dev/null) || true
    script=$1
    shift
    replaces=no
    case "$script:$1" in
        preinst:upgrade | prerm:upgrade | prerm:remove | prerm:deconfigure) replaces=yes ;;
    esac
    verdict=ok
    if [ "$replaces" = yes ] && [ "$agent" = active ]; then verdict=refused; fi
    printf '%s amdgpu-dkms %s %s gpuagent=%s amd-metrics-exporter=%s %s\n' \
        "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$script" "$*" "${agent:-unknown}" "${exporter:-unknown}" "$verdict" >>"$log"
    if [ "$verdict" = refused ]; then
        echo "modprobe: FATAL: Module amdgpu is in use. (rocmfleet lab stand-in: gpuagent.service holds the GPUs)" >&2
        return 1
    fi
    return 0
}
