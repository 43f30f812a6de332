"""A client that asks every instance's ``/health`` once a second, in its own process.

``python -m tests.lab.prober OUT ADDRESS:PORT...`` appends one line per sample to OUT: how many
instances answered 200. It runs until SIGTERM. A process of its own, not a thread of the test:
modules imported earlier in a whole-suite run (pyinfra) monkey-patch the test process with
gevent, and a real thread's lock released under gevent's hub ends ``join()`` in ``LoopExit``.
"""

from __future__ import annotations

import signal
import sys
import time
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


def main(out: str, targets: list[str]) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with open(out, "a", buffering=1) as f:
        while True:
            started = time.monotonic()
            f.write(f"{sample(targets)}\n")
            time.sleep(max(0.0, 1 - (time.monotonic() - started)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
