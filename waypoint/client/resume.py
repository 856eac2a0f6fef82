"""Moved to `waypoint.client.runs.resume`; this import path goes at the first release."""

from __future__ import annotations

import warnings

from waypoint.client.verbs import REPLANS as REPLANS
from waypoint.client.verbs import WHAT_RESUMES as WHAT_RESUMES
from waypoint.client.verbs import resume as resume

warnings.warn(
    "waypoint.client.resume moved: use waypoint.client.runs.resume",
    DeprecationWarning,
    stacklevel=2,
)
