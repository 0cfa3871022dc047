"""How IR reaches its printer: a hook the script package fills when it is imported.

The IR cannot import `tdsl.script` (the script package imports the IR), yet a PrimFunc prints
itself (`func.script()`, `func.show()`, `str(func)`) and `structural_diff` shows the nodes that
differ. `tdsl.script` registers its printer and highlighter here; `import tdsl` always imports
`tdsl.script`, so the hook is set before any user sees a node.
"""
from __future__ import annotations

from collections.abc import Callable

_HOOKS: dict[str, Callable] = {}
_NAMES = ("script", "message_text", "show", "to_html", "summary", "show_function", "function_html")


def register(**hooks: Callable) -> None:
    """Set the printing functions: script(func) -> str, message_text(node) -> str,
    show(text, style=None), to_html(text) -> str, summary(func) -> str (one line, for repr),
    show_function(func, style=None) (HTML in a notebook, else printed), function_html(func) -> str."""
    unknown = set(hooks) - set(_NAMES)
    if unknown:
        raise TypeError(f"unknown printing hook(s): {', '.join(sorted(unknown))}; known: {', '.join(_NAMES)}")
    _HOOKS.update(hooks)


def _hook(name: str) -> Callable:
    fn = _HOOKS.get(name)
    if fn is None:
        raise RuntimeError(f"no IR printer registered for {name!r}: import tdsl (tdsl.script registers it)")
    return fn


def script(func) -> str:
    """The function as TVMScript-style text."""
    return _hook("script")(func)


def message_text(node) -> str:
    """An expression, statement or buffer as it reads in a message."""
    return _hook("message_text")(node)


def show(text: str, style: str | None = None) -> None:
    """Print script text, highlighted where the terminal allows."""
    _hook("show")(text, style=style)


def to_html(text: str) -> str:
    """Script text as highlighted HTML (notebooks)."""
    return _hook("to_html")(text)


def summary(func) -> str:
    """One line about a function: name, signature, block count (`repr(func)`)."""
    return _hook("summary")(func)


def show_function(func, style: str | None = None) -> None:
    """Show a function: HTML in a notebook, highlighted text in a terminal."""
    _hook("show_function")(func, style=style)


def function_html(func) -> str:
    """A function as notebook HTML."""
    return _hook("function_html")(func)
