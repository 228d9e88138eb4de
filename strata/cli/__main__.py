"""`python -m strata.cli`: the `strata` driver."""

import sys

from strata.cli import main

sys.exit(main())
