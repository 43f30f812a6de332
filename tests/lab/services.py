"""The lab's network and services on this machine, bound to the lab bridge address only.

- the bridge ``rflab0`` the hosts' veths join (no route out: hosts reach only the lab);
- an apt proxy (tinyproxy; apt-cacher-ng answered 503 "Host not found" here);
- a container registry (Debian's ``docker-registry``), storage kept across ``lab down``;
- an HTTP server for the stand-in AMD apt repository (:mod:`tests.lab.amdrepo`);
- a stand-in Hugging Face Hub (:mod:`tests.lab.hfhub`) serving the lab image's generated model as
  ``lab/tiny-llama`` at :data:`tests.lab.hfhub.LAB_REVISION`, logging each request (never a token)
  to :data:`HF_HUB_LOG`; started once the image's root filesystem (which holds the model) is built;
- Prometheus (Debian's ``prometheus`` package), scraping every 5 s the targets of the file_sd file
  the deploy writes (``metrics_targets_file``: :data:`tests.lab.config.METRICS_TARGETS_FILE`), its
  data under ``run/`` (gone with ``lab down``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.lab import config

SERVICES = ("apt-proxy", "registry", "amd-repo", "prometheus", "hf-hub")
#: The stand-in Hub's request log: one JSON line per request (tests.lab.hfhub.downloads reads it).
HF_HUB_LOG = config.RUN_DIR / "services" / "hf-hub-requests.jsonl"


def bridge_up() -> None:
    """Create the lab bridge with the gateway address (idempotent)."""
    if Path(f"/sys/class/net/{config.BRIDGE}").exists():
        return
    for cmd in (
        ["ip", "link", "add", config.BRIDGE, "type", "bridge"],
        ["ip", "addr", "add", f"{config.GATEWAY}/{config.PREFIX_LEN}", "dev", config.BRIDGE],
        ["ip", "link", "set", config.BRIDGE, "up"],
    ):
        subprocess.run(cmd, check=True)


def bridge_down() -> None:
    """Remove the lab bridge (idempotent)."""
    if Path(f"/sys/class/net/{config.BRIDGE}").exists():
        subprocess.run(["ip", "link", "del", config.BRIDGE], check=True)


def _command(service: str) -> list[str]:
    run = config.RUN_DIR / "services"
    if service == "apt-proxy":
        conf = run / "tinyproxy.conf"
        conf.write_text(
            f"Port {config.APT_PROXY_PORT}\nListen {config.GATEWAY}\nTimeout 600\n"
            f"Allow {config.NETWORK_PREFIX}.0/{config.PREFIX_LEN}\nConnectPort 443\n"
            "MaxClients 100\nLogLevel Warning\n"
        )
        return ["tinyproxy", "-d", "-c", str(conf)]
    if service == "registry":
        conf = run / "registry.yml"
        storage = config.CACHE_DIR / "registry"
        storage.mkdir(parents=True, exist_ok=True)
        conf.write_text(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
            f"    rootdirectory: {storage}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: {config.GATEWAY}:{config.REGISTRY_PORT}\n"
        )
        return ["docker-registry", "serve", str(conf)]
    if service == "amd-repo":
        from tests.lab import amdrepo

        return [
            sys.executable,
            "-m",
            "http.server",
            str(config.AMD_REPO_PORT),
            "--bind",
            config.GATEWAY,
            "--directory",
            str(amdrepo.build()),
        ]
    if service == "hf-hub":
        return [
            sys.executable,
            "-m",
            "tests.lab.hfhub",
            "--listen",
            f"{config.GATEWAY}:{config.HF_HUB_PORT}",
            "--repo",
            "lab/tiny-llama",
            "--dir",
            str(config.CACHE_DIR / "vllm-image-rootfs" / "opt" / "models" / "tiny-llama"),
            "--log",
            str(HF_HUB_LOG),
        ]
    if service == "prometheus":
        conf = run / "prometheus.yml"
        # Every target of the file: the file's own labels (job included) win over job_name's.
        conf.write_text(
            "global:\n  scrape_interval: 5s\n  scrape_timeout: 4s\n  evaluation_interval: 5s\n"
            "scrape_configs:\n  - job_name: rocmfleet\n    file_sd_configs:\n"
            f"      - files: ['{config.METRICS_TARGETS_FILE}']\n        refresh_interval: 5s\n"
        )
        config.METRICS_TARGETS_FILE.parent.mkdir(parents=True, exist_ok=True)
        return [
            "prometheus",
            f"--config.file={conf}",
            f"--storage.tsdb.path={run / 'prometheus-data'}",
            f"--web.listen-address={config.GATEWAY}:{config.PROMETHEUS_PORT}",
            "--log.level=warn",
        ]
    raise ValueError(f"unknown lab service {service!r}; known: {', '.join(SERVICES)}")


def _pidfile(service: str) -> Path:
    return config.RUN_DIR / "services" / f"{service}.pid"


def is_running(service: str) -> bool:
    """True when ``service``'s process is alive."""
    try:
        os.kill(int(_pidfile(service).read_text()), 0)
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return False
    return True


def _wait_port(port: int, timeout_s: float = 20) -> None:
    import socket

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection((config.GATEWAY, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"nothing listening on {config.GATEWAY}:{port} after {timeout_s} s")


PORTS = {
    "apt-proxy": config.APT_PROXY_PORT,
    "registry": config.REGISTRY_PORT,
    "amd-repo": config.AMD_REPO_PORT,
    "hf-hub": config.HF_HUB_PORT,
    "prometheus": config.PROMETHEUS_PORT,
}


def start(service: str) -> None:
    """Start ``service`` in the background and wait for its port (idempotent)."""
    if is_running(service):
        return
    run = config.RUN_DIR / "services"
    run.mkdir(parents=True, exist_ok=True)
    log = (run / f"{service}.log").open("ab")
    proc = subprocess.Popen(
        _command(service),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=config.REPO_ROOT,
    )
    _pidfile(service).write_text(str(proc.pid))
    _wait_port(PORTS[service])


def stop(service: str) -> None:
    """Stop ``service`` (idempotent)."""
    if is_running(service):
        pid = int(_pidfile(service).read_text())
        os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
    _pidfile(service).unlink(missing_ok=True)
