"""``python -m rocmfleet.cli``: the ``rocmfleet`` command without its console script."""

import sys

from rocmfleet.cli import main

sys.exit(main())
