"""``python -m rlblocks`` runs the ``rlblocks`` command."""

import sys

from rlblocks.cli import main

sys.exit(main())
