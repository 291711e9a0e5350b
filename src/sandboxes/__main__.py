"""``python -m sandboxes``: see :mod:`sandboxes.cli`."""

import sys

from .cli import main

sys.exit(main())
