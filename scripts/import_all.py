"""Import every module of the installed `waypoint`: a dependency the wheel does not declare fails.

Run by scripts/release-check.sh with the fresh venv's interpreter, outside the checkout. The
modules of an optional extra may miss that extra's packages, and only those.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import waypoint

# module -> the packages of its extra it may miss (`s3`: boto3; `otel`: the OpenTelemetry SDK)
OPTIONAL = {
    "waypoint.stores.s3": {"boto3", "botocore"},
    "waypoint._operations.tracing": {"opentelemetry.sdk", "opentelemetry.exporter"},
}


def main() -> int:
    """Print each module that does not import (outside OPTIONAL) and exit 1 if there is one."""
    if "site-packages" not in (waypoint.__file__ or ""):
        print(f"waypoint came from {waypoint.__file__}, not the installed wheel", file=sys.stderr)
        return 1
    problems = []
    for module in pkgutil.walk_packages(waypoint.__path__, "waypoint."):
        try:
            importlib.import_module(module.name)
        except ModuleNotFoundError as err:
            missing = err.name or ""
            excused = OPTIONAL.get(module.name, set())
            if not any(missing == p or missing.startswith(f"{p}.") for p in excused):
                problems.append(f"{module.name}: {err} (is it in [project] dependencies?)")
        except ImportError as err:
            problems.append(f"{module.name}: {err}")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
