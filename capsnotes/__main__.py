"""``python -m capsnotes``: the command line of :mod:`capsnotes.training.cli`."""

import sys

from .training.cli import main

sys.exit(main())
