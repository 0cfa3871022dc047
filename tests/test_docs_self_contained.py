"""The project's docs speak to users of a clone: nothing in README.md, docs/, tutorials/ or the
package cites a document they do not have (the design notes the project was built from, "SPEC",
or a path outside the repository); the user-facing contract is in docs/ itself."""
from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
CITES = [
    (re.compile(r"\bSPEC\b"), 'cites "SPEC"'),
    (re.compile(r"\.\./shared\b|/work/shared"), "points outside the repository"),
]
PROSE_CITES = [(re.compile(r"\b(the|this) spec\b", re.IGNORECASE), 'cites "the spec"')]


def _files():
    yield ROOT / "README.md"
    for folder, patterns in (("docs", ("*.md",)), ("tutorials", ("*.py", "*.md")), ("tdsl", ("*.py", "*.md", "*.h"))):
        for pattern in patterns:
            yield from sorted((ROOT / folder).rglob(pattern))


def test_no_user_facing_file_cites_a_document_users_do_not_have():
    found = []
    for path in _files():
        text = path.read_text(encoding="utf-8", errors="replace")
        rules = CITES + (PROSE_CITES if path.suffix == ".md" else [])
        for pattern, what in rules:
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{path.relative_to(ROOT)}:{line} {what}")
    assert not found, "\n".join(found)


def test_the_docs_the_readme_lists_exist():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in set(re.findall(r"(docs/[\w.]+\.md|tutorials/\d\d_\w+\.py)", readme)):
        assert (ROOT / name).is_file(), f"README.md names {name}, which is not in the repository"
