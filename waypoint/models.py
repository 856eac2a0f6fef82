"""Deprecated alias of `waypoint.protocol`, kept for one release."""

import warnings

from waypoint.protocol import *  # noqa: F403
from waypoint.protocol import __all__ as __all__

warnings.warn(
    "waypoint.models moved to waypoint.protocol; import it from there"
    " (this alias goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
