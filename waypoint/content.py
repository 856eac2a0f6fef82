"""Internal now (`waypoint._content`): import its names from `waypoint`.

This path warns once, and works until the first release.
"""

from waypoint._moved import old_path

__getattr__ = old_path(__name__)
