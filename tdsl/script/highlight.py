"""Syntax highlighting of script text: rich in a terminal, inline-styled HTML in notebooks."""
from __future__ import annotations

import difflib
import html


def show(text: str, style: str | None = None) -> None:
    """Print script text, highlighted when the output is a terminal."""
    from rich.console import Console
    from rich.syntax import Syntax

    console = Console()
    if not console.is_terminal and style is None:
        print(text, end="" if text.endswith("\n") else "\n")
        return
    console.print(Syntax(text.rstrip("\n"), "python", theme=style or "monokai", background_color="default"))


def to_html(text: str) -> str:
    """Script text as a self-contained highlighted HTML fragment (for `_repr_html_`)."""
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer
    except ImportError:  # pygments comes with rich; keep a plain fallback anyway
        return f"<pre>{html.escape(text)}</pre>"
    return highlight(text, PythonLexer(), HtmlFormatter(noclasses=True, style="default"))


def diff(before: str, after: str, before_name: str = "before", after_name: str = "after") -> str:
    """A unified diff of two script texts."""
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), before_name, after_name, lineterm="")
    return "\n".join(lines) + "\n"


def show_diff(before: str, after: str) -> None:
    """Print a highlighted unified diff (plain text when not a terminal)."""
    text = diff(before, after)
    from rich.console import Console
    from rich.syntax import Syntax

    console = Console()
    if not console.is_terminal:
        print(text, end="")
        return
    console.print(Syntax(text.rstrip("\n"), "diff", theme="monokai", background_color="default"))


def diff_html(before: str, after: str) -> str:
    """The unified diff as HTML, added lines green and removed lines red."""
    rows = []
    for line in diff(before, after).splitlines():
        color = "#e6ffec" if line.startswith("+") else "#ffebe9" if line.startswith("-") else "transparent"
        rows.append(f'<div style="background:{color};white-space:pre;font-family:monospace">'
                    f"{html.escape(line) or '&nbsp;'}</div>")
    return "<div>" + "".join(rows) + "</div>"
