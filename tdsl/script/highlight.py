"""Script text for people: rich highlighting in a terminal, HTML in notebooks (see html.py)."""
from __future__ import annotations

import difflib
import sys
from collections.abc import Sequence


def in_notebook() -> bool:
    """True inside a Jupyter kernel (JupyterLab, VS Code, nbconvert --execute), where HTML renders;
    False in a terminal, a script or a plain IPython shell."""
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def display_html(obj) -> bool:
    """Show `obj` (anything with `_repr_html_`) as a notebook output; False when not in one."""
    if not in_notebook():
        return False
    from IPython.display import display

    display(obj)
    return True


def show(text: str, style: str | None = None) -> None:
    """Print script text, highlighted when the output is a terminal (`style`: a pygments style
    name, which also forces highlighting)."""
    from rich.console import Console
    from rich.syntax import Syntax

    console = Console()
    if not console.is_terminal and style is None:
        print(text, end="" if text.endswith("\n") else "\n")
        return
    console.print(Syntax(text.rstrip("\n"), "python", theme=style or "monokai", background_color="default"))


def show_function(func, style: str | None = None) -> None:
    """`func.show()`: HTML in a notebook (unless a pygments `style` is asked for), else printed."""
    if style is None and display_html(func):
        return
    show(func.script(), style=style)


def to_html(text: str, title: Sequence[str] = ()) -> str:
    """Script text as a self-contained highlighted HTML fragment (for `_repr_html_`)."""
    from .html import script_html

    return script_html(text, title)


def diff(before: str, after: str, before_name: str = "before", after_name: str = "after") -> str:
    """A unified diff of two script texts."""
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), before_name, after_name, lineterm="")
    return "\n".join(lines) + "\n"


def show_diff_text(text: str) -> None:
    """Print a unified diff, highlighted in a terminal (plain text otherwise)."""
    from rich.console import Console
    from rich.syntax import Syntax

    console = Console()
    if not console.is_terminal:
        print(text, end="" if text.endswith("\n") else "\n")
        return
    console.print(Syntax(text.rstrip("\n"), "diff", theme="monokai", background_color="default"))


def show_diff(before: str, after: str) -> None:
    """Print a highlighted unified diff of two script texts (plain text when not a terminal)."""
    show_diff_text(diff(before, after))


def diff_html(before: str, after: str, title: Sequence[str] = ()) -> str:
    """The unified diff as HTML: both sides highlighted, removed lines red, added green."""
    from .html import diff_html as render

    return render(before, after, title)
