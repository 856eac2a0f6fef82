r"""mkdocs hook: the pages are written for GitHub; two things GitHub reads differently, mended.

- A link into the repository (`../examples/payments/`) resolves on GitHub, relative to `docs/`.
  mkdocs knows only the pages, so it would call every such link broken; this hook checks that
  the file or folder exists in the checkout instead (a missing one is a warning, which `--strict`
  fails), then on the site points the link at `repo_url`'s copy or, with no `repo_url`, keeps
  its text alone.
- A pipe in a table's code span must be escaped for GitHub (`step\|turn`); Python-Markdown
  already leaves pipes in code spans alone and would show the backslash.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.repo_links")
CODE = re.compile(r"`[^`\n]+`")
LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]+)\]\((?P<target>\.\./[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Check each link that leaves `docs/` and rewrite it, and unescape pipes in table code."""
    docs = Path(config["docs_dir"]).resolve()
    root = docs.parent
    here = (docs / page.file.src_path).parent

    def rewrite(m: re.Match[str]) -> str:
        target = (here / m["target"]).resolve()
        if not target.is_relative_to(root) or not target.exists():
            log.warning(
                "Doc file '%s' links to '%s', which is not in the repository.",
                page.file.src_path,
                m["target"],
            )
            return m[0]
        if not config["repo_url"]:
            return m["text"]
        url = f"{config['repo_url'].rstrip('/')}/blob/HEAD/{target.relative_to(root).as_posix()}"
        return f"[{m['text']}]({url}{m['anchor'] or ''})"

    lines = [
        CODE.sub(lambda m: m[0].replace("\\|", "|"), line) if line.startswith("|") else line
        for line in LINK.sub(rewrite, markdown).split("\n")
    ]
    return "\n".join(lines)
