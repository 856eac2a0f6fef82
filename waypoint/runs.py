"""Deprecated alias of `waypoint.client.runs`, kept for one release."""

import warnings

from waypoint.client.runs import *  # noqa: F403

warnings.warn(
    "waypoint.runs moved to waypoint.client.runs; import it from there"
    " (this alias goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
