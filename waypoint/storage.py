"""Deprecated alias of `waypoint.stores.payloads`, kept for one release."""

import warnings

from waypoint.stores.payloads import *  # noqa: F403

warnings.warn(
    "waypoint.storage moved to waypoint.stores.payloads; import it from there"
    " (this alias goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
