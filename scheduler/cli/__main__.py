"""``python -m labhive.scheduler.cli``: the ``labhive`` command, as the entry point runs it."""

import sys

from labhive.scheduler.cli import main

sys.exit(main())
