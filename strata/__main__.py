"""`python -m strata`: the `strata` driver."""

import sys

from strata.cli import main

sys.exit(main())
