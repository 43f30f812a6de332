# PYTHON_ARGCOMPLETE_OK (argcomplete: `eval "$(register-python-argcomplete rocmfleet)"` completes the command)
"""The ``rocmfleet`` console script: imports the CLI under a guard, so that Ctrl-C while the
modules load (about 0.4 s: pyinfra, pydantic, ansible-core's vault) ends like any other
interruption, with one line and exit status 130, not a traceback.

.. code:: console

    $ rocmfleet status inventories/prod.py   # ^C at once
    rocmfleet: interrupted while starting; nothing was done
"""

from __future__ import annotations

import sys

#: Exit status of a command ended by Ctrl-C (128 + SIGINT), as :mod:`rocmfleet.cli` uses.
INTERRUPTED = 130


def main() -> int:
    """Run :func:`rocmfleet.cli.main` with ``sys.argv``; 130 when interrupted before it starts."""
    try:
        from rocmfleet.cli import main as cli_main
    except KeyboardInterrupt:
        print("\nrocmfleet: interrupted while starting; nothing was done", file=sys.stderr)
        return INTERRUPTED
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
