"""tdsl script (a Python AST) -> PrimFunc: the entry points.

Every rejection is a ScriptError naming the file and line with a caret under the offending
source, and saying what is allowed instead.

The Parser (reader.py) is one class assembled from a part per kind of construct, each a module
here: core (spans, errors, scopes), signature (parameters, handles, the prelude), buffers
(buffer declarations), statements, blocks, expressions, calls (T functions) and tvm_compat
(TVMScript's lower-level constructs); each part reaches the others through `self`. The parts
load on the first parse, not on `import tdsl`.
"""
from __future__ import annotations

import ast
import contextlib
import inspect
import textwrap
from typing import Any

from ...errors import ScriptError, Span
from ...ir.stmt import PrimFunc
from .frames import _Source


def __getattr__(name: str):
    if name == "Parser":  # the class itself, for whoever asks for it by this module's name
        from .reader import Parser

        return Parser
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# entry points ------------------------------------------------------------------------------------


def _find_function(tree: ast.Module, src: _Source, what: str) -> ast.FunctionDef:
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    others = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.Import, ast.ImportFrom))
              and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    if len(funcs) != 1 or others:
        node = (others or funcs[1:] or [tree.body[0] if tree.body else None])[0]
        line = getattr(node, "lineno", 1)
        text = src.lines[line - 1] if 0 < line <= len(src.lines) else None
        raise ScriptError(f"{what} must hold exactly one function definition",
                          Span(src.file, line + src.line_offset, 0, None, text),
                          "write one @T.prim_func def at top level")
    return funcs[0]


def _run(tree_fn: ast.FunctionDef, src: _Source, closure: dict) -> PrimFunc | ScriptError:
    """The parsed function, or the ScriptError to raise (entry points raise it, so that the
    traceback the user sees ends at their own code, not inside the parser)."""
    from ...deep import DEEP_LIMIT, run_deep
    from .reader import Parser

    parser = Parser(src, closure)
    try:
        # a fresh Parser per attempt: run_deep retries on a bigger stack, and a parser keeps state
        return run_deep(lambda: Parser(src, closure).parse_function(tree_fn))
    except ScriptError as err:
        return err.with_traceback(None)
    except RecursionError:
        return ScriptError(f"the function is nested too deeply to parse (more than about {DEEP_LIMIT} levels)",
                           parser.span(tree_fn))


def parse(source, extra_vars: dict[str, Any] | None = None) -> PrimFunc:
    """Parse the source of one decorated function (a string), or a Python function object.

    `T` is predefined; `extra_vars` adds names the script may refer to.
    """
    if callable(source) and not isinstance(source, str):
        return parse_function(source)
    if not isinstance(source, str):
        raise TypeError(f"tdsl.parse takes script text or a function, not {type(source).__name__}")
    text = textwrap.dedent(source)
    src = _Source(text.splitlines(), "<tdsl script>")
    from ...deep import run_deep

    try:
        tree = run_deep(lambda: ast.parse(text))
    except RecursionError:
        raise ScriptError("the function is nested too deeply to parse",
                          Span("<tdsl script>", 1, 0, None, None)).with_traceback(None) from None
    except SyntaxError as exc:
        raise ScriptError(f"invalid Python syntax: {exc.msg}",
                          Span("<tdsl script>", exc.lineno or 1, max((exc.offset or 1) - 1, 0), None,
                               exc.text)).with_traceback(None) from None
    fn = _find_function(tree, src, "tdsl.parse's text")
    from .. import T as T_module

    closure = {"T": T_module}
    closure.update(extra_vars or {})
    result = _run(fn, src, closure)
    if isinstance(result, ScriptError):
        raise result
    return result


def parse_function(fn, scope: dict[str, Any] | None = None) -> PrimFunc:
    """The work of the @T.prim_func decorator; `scope` holds the defining scope's local names."""
    result = parse_function_or_error(fn, scope)
    if isinstance(result, ScriptError):
        raise result
    return result


def parse_function_or_error(fn, scope: dict[str, Any] | None = None) -> PrimFunc | ScriptError:
    if isinstance(fn, PrimFunc):
        return fn
    try:
        lines, first = inspect.getsourcelines(fn)
        file = inspect.getsourcefile(fn) or inspect.getfile(fn)
    except (OSError, TypeError) as exc:
        return ScriptError(f"cannot read the source of {getattr(fn, '__name__', fn)!r}: {exc}",
                           None, "define prim_funcs in a file or notebook cell, or use tdsl.parse(text)")
    raw = "".join(lines)
    text = textwrap.dedent(raw)
    col = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
    src = _Source(text.splitlines(), file, first - 1, col)
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:  # pragma: no cover - Python already compiled it
        return ScriptError(exc.msg, Span(file, first + (exc.lineno or 1) - 1, 0, None, exc.text))
    fn_node = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    closure = dict(fn.__globals__)
    if scope is not None and scope is not fn.__globals__:
        closure.update(scope)
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            with contextlib.suppress(ValueError):
                closure[name] = cell.cell_contents
    from .. import T as T_module

    closure.setdefault("T", T_module)
    return _run(fn_node, src, closure)  # type: ignore[arg-type]


__all__ = ["Parser", "parse", "parse_function", "parse_function_or_error"]
