"""`python -m upsertlake.cli`: the same as the `upsertlake` console script."""

import sys

from upsertlake.cli import main

sys.exit(main())
