"""Deprecated alias of `waypoint.dev_server`, kept for one release."""

import warnings

from waypoint.dev_server import *  # noqa: F403

warnings.warn(
    "waypoint.server moved to waypoint.dev_server; import it from there"
    " (this alias goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
