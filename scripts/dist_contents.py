"""Check what a built sdist and wheel hold: the library, its data, and nothing of the repository's.

Usage: `python scripts/dist_contents.py DIST_DIR`, after `python -m build --outdir DIST_DIR`.
Prints nothing and exits 0 when both hold what they should; else one line per problem, exit 1.
"""

from __future__ import annotations

import ast
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).parent.parent
PACKAGE = ROOT / "waypoint"


def version() -> str:
    """`waypoint.__version__` as the source writes it, read without importing the package."""
    for node in ast.parse((PACKAGE / "__init__.py").read_text()).body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__version__":
            return ast.literal_eval(node.value)
    raise SystemExit("waypoint/__init__.py writes no __version__")


def data_files() -> set[str]:
    """Every file of `waypoint/` a wheel must carry that is not a module: py.typed, templates."""
    return {
        str(p.relative_to(ROOT))
        for p in PACKAGE.rglob("*")
        if p.is_file() and p.suffix not in {".py", ".pyc"} and "__pycache__" not in p.parts
    }


def wheel_problems(wheel: Path, dist_info: str) -> list[str]:
    """What is wrong with the wheel: a top-level name besides the package, a file missing."""
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {name.split("/")[0] for name in names}
    problems = [
        f"wheel: top-level {top!r} is not the library" for top in tops - {"waypoint", dist_info}
    ]
    problems += [f"wheel: {path} is missing" for path in sorted(data_files() - names)]
    return problems


def sdist_problems(sdist: Path, base: str) -> list[str]:
    """What is wrong with the sdist: a file a packager needs is missing, or a clone's is there."""
    names = set(tarfile.open(sdist).getnames())
    wanted = ["README.md", "CHANGELOG.md", "pyproject.toml", "waypoint/__init__.py"]
    wanted += sorted(data_files())
    problems = [f"sdist: {path} is missing" for path in wanted if f"{base}/{path}" not in names]
    outside = (f"{base}/examples/", f"{base}/tests/")
    problems += [f"sdist: holds {n}" for n in sorted(names) if n.startswith(outside)]
    return problems


def main(dist: Path) -> int:
    """Check the one sdist and one wheel of this version in `dist`; print each problem."""
    base = f"waypoint_agents-{version()}"
    wheel, sdist = dist / f"{base}-py3-none-any.whl", dist / f"{base}.tar.gz"
    missing = [f"{p.name} was not built" for p in (wheel, sdist) if not p.is_file()]
    problems = missing or wheel_problems(wheel, f"{base}.dist-info") + sdist_problems(sdist, base)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
