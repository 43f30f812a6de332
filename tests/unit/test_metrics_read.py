"""``metrics-read.sh`` and :mod:`rocmfleet.fleet.metrics.read` against local HTTP servers on 127.0.0.1
(the recorded vLLM 0.32.0 page, the exporter stand-in's, a page that is not the text format) and a
closed port; then the ``metrics`` check module's verdicts on what they read."""

from __future__ import annotations

import http.server
import socket
import subprocess
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocmfleet.config.settings import host_config
from rocmfleet.domain import metricfamilies
from rocmfleet.fleet.check import expect
from rocmfleet.fleet.check import test_metrics as check
from rocmfleet.fleet.metrics import read
from rocmfleet.plan.build import plan_host

ROOT = Path(__file__).resolve().parents[2]
VLLM_PAGE = ROOT / "tests" / "fixtures" / "metrics" / "vllm-0.32.0-cpu.txt"
EXPORTER_PAGE = ROOT / "tests" / "lab" / "standin" / "exporter-metrics.prom"


def serve(body: bytes) -> tuple[http.server.HTTPServer, int]:
    """A server on a free port of 127.0.0.1 answering ``GET /metrics`` with ``body`` (404 elsewhere)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path != "/metrics":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return server, server.server_address[1]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ports() -> Iterator[dict[str, int]]:
    """Ports of this machine: ``vllm`` (the recorded page), ``exporter``, ``garbage``; ``closed`` and ``closed2``."""
    if not EXPORTER_PAGE.is_file():
        pytest.fail(f"{EXPORTER_PAGE.relative_to(ROOT)} missing")
    servers = {
        "vllm": serve(VLLM_PAGE.read_bytes()),
        "exporter": serve(EXPORTER_PAGE.read_bytes()),
        "garbage": serve(b"<html>not metrics</html>\n"),
    }
    found = {name: port for name, (_server, port) in servers.items()}
    found["closed"] = closed_port()
    found["closed2"] = next(p for p in iter(closed_port, None) if p != found["closed"])
    yield found
    for server, _port in servers.values():
        server.shutdown()
        server.server_close()


def run(command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60)


def test_one_command_reads_every_port_and_says_which_did_not_answer(ports):
    result = run(read.command([ports["vllm"], ports["closed"], ports["exporter"]]))
    assert result.returncode == 1  # a port did not answer
    pages = read.split(result.stdout)
    assert list(pages) == [ports["vllm"], ports["closed"], ports["exporter"]]
    assert pages[ports["vllm"]].text == VLLM_PAGE.read_text()
    assert pages[ports["exporter"]].text == EXPORTER_PAGE.read_text()
    closed = pages[ports["closed"]]
    assert closed.error is not None and closed.error.startswith("curl exit 7") and closed.text == ""
    served = read.families(pages[ports["vllm"]].text)
    assert metricfamilies.missing(metricfamilies.vllm_families("0.32.0"), served) == []
    assert {"vllm:request_success", "vllm:request_success_total", "vllm:time_to_first_token_seconds_bucket"} <= served
    assert any(s.name == "vllm:num_requests_running" for s in read.samples(pages[ports["vllm"]].text))


def test_a_page_holding_a_line_like_the_scripts_header_does_not_split_another_page(ports):
    # "# rocmfleet-metrics ..." is a comment of the text format (ignored unless HELP or TYPE), so a
    # page may hold one; read as a header it cut that page and made up a page for another port
    body = b"# rocmfleet-metrics 1 ok\nup 1\n# rocmfleet-metrics 2 curl exit 7: x\nhttp_requests_total 5\n"
    server, port = serve(body)
    try:
        result = run(read.command([port, ports["vllm"]]))
    finally:
        server.shutdown()
        server.server_close()
    pages = read.split(result.stdout)
    assert list(pages) == [port, ports["vllm"]] and result.returncode == 0
    assert [s.name for s in read.samples(pages[port].text)] == ["up", "http_requests_total"]
    assert pages[ports["vllm"]].text == VLLM_PAGE.read_text()


def test_every_port_answering_is_exit_0_and_a_usage_error_is_2(ports):
    assert run(read.command([ports["vllm"], ports["exporter"]])).returncode == 0
    assert run(read.command([])).returncode == 2
    assert run(read.command(["80; true"])).returncode == 2  # type: ignore[list-item]


def test_a_page_that_is_not_the_text_format_is_refused_by_the_parser(ports):
    pages = read.split(run(read.command([ports["garbage"]])).stdout)
    with pytest.raises(ValueError):
        read.families(pages[ports["garbage"]].text)


# --- the check module on those pages (its functions called as pytest would, the host run here)


class LocalHost:
    """A testinfra-like host: ``run`` runs the command on this machine; the name keys ``expect.once``."""

    def __init__(self, name: str) -> None:
        self.backend = types.SimpleNamespace(hostname=name)

    def run(self, command: str) -> Any:
        done = run(command)
        return types.SimpleNamespace(rc=done.returncode, stdout=done.stdout, stderr=done.stderr)


@pytest.fixture
def checked(lab_data, ports, monkeypatch, request):
    """``make(instance_port, exporter_port, **data)``: a host (named per call) with one instance, its
    plan's check values and what the check's one ``metrics-read.sh`` read gave; units taken as active."""
    monkeypatch.setattr(expect, "running", lambda _host, _unit: True)
    monkeypatch.setattr(expect, "_memo", {})

    def make(instance: str = "vllm", exporter: str = "exporter", **data: Any):
        config = host_config(
            {
                **lab_data,
                "vllm_instances": [{"name": "tiny-llama-a", "port": ports[instance], "gpus": [0]}],
                "metrics_exporter_port": ports[exporter],
                **data,
            }
        )
        host = LocalHost(f"{request.node.name}-{instance}-{exporter}")
        checks = plan_host(host.backend.hostname, config).checks
        return host, checks, check.pages.__wrapped__(host, checks)  # type: ignore[attr-defined]

    return make


def test_the_checks_pass_on_the_recorded_pages(checked):
    host, checks, pages = checked()
    check.test_vllm_families(host, checks, checks.instances[0], pages)
    check.test_exporter_families(checks, pages)


def test_a_port_that_does_not_answer_fails_naming_port_and_instance(checked, ports):
    host, checks, pages = checked("closed", "closed2")
    with pytest.raises(AssertionError, match=rf"port {ports['closed']} \(instance tiny-llama-a, vLLM 0.32.0\): "
                       r"/metrics does not answer: curl exit 7"):  # fmt: skip
        check.test_vllm_families(host, checks, checks.instances[0], pages)
    with pytest.raises(
        AssertionError, match=rf"port {ports['closed2']} \(AMD device-metrics-exporter\): /metrics does"
    ):
        check.test_exporter_families(checks, pages)


def test_missing_families_are_named(checked, ports):
    # The exporter's page on an instance's port: none of vLLM's families; vLLM's on the exporter's.
    host, checks, pages = checked("exporter", "vllm")
    with pytest.raises(AssertionError) as raised:
        check.test_vllm_families(host, checks, checks.instances[0], pages)
    assert str(raised.value).startswith(
        f"port {ports['exporter']} (instance tiny-llama-a, vLLM 0.32.0): /metrics lacks vllm:num_requests_running, "
    )
    with pytest.raises(AssertionError, match="/metrics lacks gpu_gfx_activity, gpu_umc_activity, "):
        check.test_exporter_families(checks, pages)


def test_a_page_of_another_format_fails(checked, ports):
    host, checks, pages = checked("garbage")
    with pytest.raises(AssertionError, match="is not the Prometheus text format"):
        check.test_vllm_families(host, checks, checks.instances[0], pages)


def test_no_exporter_is_a_skip_and_its_port_is_not_read(checked, ports):
    host, checks, pages = checked(metrics_exporter=False)
    assert list(pages) == [ports["vllm"]]
    with pytest.raises(pytest.skip.Exception, match="metrics_exporter is false"):
        check.test_exporter_families(checks, pages)


def test_a_stopped_unit_is_a_skip(checked, monkeypatch):
    host, checks, pages = checked()
    monkeypatch.setattr(expect, "running", lambda _host, _unit: False)
    with pytest.raises(pytest.skip.Exception, match="vllm-tiny-llama-a.service is not active"):
        check.test_vllm_families(host, checks, checks.instances[0], pages)


def test_a_read_that_did_not_run_is_an_error_not_a_failure(lab_data):
    from rocmfleet.domain.tooloutput import CannotCheck

    class Broken(LocalHost):
        def run(self, command: str) -> Any:
            return types.SimpleNamespace(rc=127, stdout="", stderr="sh: curl: not found")

    with pytest.raises(CannotCheck, match="metrics-read.sh exited 127: sh: curl: not found"):
        check._read(Broken("b"), [8000])


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("0.33.0", metricfamilies.VLLM_032),
        ("0.32.0", metricfamilies.VLLM_032),
        ("0.9.2", metricfamilies.VLLM_09),
        ("0.20.1", metricfamilies.VLLM_COMMON),
    ],
)
def test_expected_vllm_families_by_version(version, expected):
    assert metricfamilies.vllm_families(version) == expected
    names = [f.name for f in expected]
    assert "http_requests_total" in names and len(names) == len(set(names))


def test_0_9_names_are_the_old_ones():
    names = {f.name for f in metricfamilies.VLLM_09}
    assert {"vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds"} <= names
    assert "vllm:kv_cache_usage_perc" not in names
    with pytest.raises(ValueError, match="not a version"):
        metricfamilies.vllm_families("latest")
