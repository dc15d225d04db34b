"""``python -m labhive.scheduler.cli``: the ``labhive`` command, as the entry point runs it."""

import sys

from labhive.scheduler.cli import main

if __name__ == "__main__":  # not on import (pkgutil.walk_packages imports every module)
    sys.exit(main())
