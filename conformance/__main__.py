"""`python -m conformance --backend NAME ...`: the same as `euler conformance`."""

import sys

from .cli import main

sys.exit(main())
