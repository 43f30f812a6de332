"""A client that asks every instance's ``/health`` once a second, in its own process, and with
``--load MODEL`` also sends each instance one small completion a second (steady traffic).

``python -m tests.lab.prober OUT [--load MODEL] ADDRESS:PORT...`` appends one line per sample to
OUT: how many instances answered 200. With ``--load``, ``OUT.load`` gets one line per sample:
``OK FAILED`` completions. The completions ask for ``logprobs`` (as many API clients do, and the
smoke benchmark does not), at temperature 0, two tokens: the lab's bad version
``0.32.0-lab.flaky`` (tests/lab/image.py) answers a share of them with HTTP 500, which the
instances' own ``/metrics`` count (``rollout --soak`` compares them). It runs until SIGTERM. A
process of its own, not a thread of the test: modules imported earlier in a whole-suite run
(pyinfra) monkey-patch the test process with gevent, and a real thread's lock released under
gevent's hub ends ``join()`` in ``LoopExit``.
"""

from __future__ import annotations

import json
import signal
import sys
import time
import urllib.error
import urllib.request


def sample(targets: list[str]) -> int:
    """How many of ``targets`` (``address:port``) answer ``/health`` with 200 within 5 s (the
    lab's 2 cores also run the gate's benchmark; a stopped instance refuses the connection at once)."""
    ok = 0
    for target in targets:
        try:
            with urllib.request.urlopen(f"http://{target}/health", timeout=5) as r:
                ok += r.status == 200
        except OSError:
            pass
    return ok


def load(targets: list[str], model: str) -> tuple[int, int]:
    """One completion to each of ``targets``; (answered 200, failed otherwise). A target that
    refuses the connection (a stopped instance) counts as neither: no request reached a server."""
    body = json.dumps(
        {"model": model, "prompt": "The capital of France is", "max_tokens": 2, "temperature": 0, "logprobs": 1}
    ).encode()
    ok = failed = 0
    for target in targets:
        request = urllib.request.Request(
            f"http://{target}/v1/completions", data=body, headers={"content-type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                ok += r.status == 200
        except urllib.error.HTTPError:
            failed += 1
        except OSError:
            pass
    return ok, failed


def main(out: str, targets: list[str], model: str | None = None) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with open(out, "a", buffering=1) as f, open(out + ".load", "a", buffering=1) as loads:
        while True:
            started = time.monotonic()
            f.write(f"{sample(targets)}\n")
            if model:
                ok, failed = load(targets, model)
                loads.write(f"{ok} {failed}\n")
            time.sleep(max(0.0, 1 - (time.monotonic() - started)))


if __name__ == "__main__":
    args = sys.argv[1:]
    model = None
    if len(args) > 2 and args[1] == "--load":
        model = args[2]
        del args[1:3]
    main(args[0], args[1:], model)
