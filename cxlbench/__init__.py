"""cxlbench: latency, bandwidth and placement-verified measurements on every memory kind."""
__version__ = "0.1.0"

import os as _os

# The folder this cxlbench was imported from. Workers and emulated guests start beside it
# (`python -m` would put the working directory first, and a checkout there may lack the
# compiled core), so they run this same built package.
PACKAGE_PARENT = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
