"""Script text and diffs as HTML for notebooks (`_repr_html_`): readable in light and dark themes.

One fragment carries everything it needs: a `<style>` block with its own light and dark
palettes (every text colour has a WCAG AA contrast >= 4.5 on every background it is drawn on;
tests/script/test_html_browser.py measures it in Chromium), picked by the notebook's theme:
JupyterLab's `data-jp-theme-light` on <body>, VS Code's `vscode-light`/`vscode-dark` body
classes, else the reader's `prefers-color-scheme` (nbconvert HTML, other viewers). The code
font is the notebook's own (`--jp-code-font-family`, `--vscode-editor-font-family`), always
ending in `monospace`; lines never wrap, a long line scrolls the box sideways. Where a viewer
strips `<style>` (some sanitizers do), inline styles keep the light palette's background,
text colour, font and layout, so the text stays readable, only without token colours.
"""
from __future__ import annotations

import difflib
import html
from collections.abc import Sequence

# name -> (light, dark). Token classes (kw, str, ...) are pygments-like but our own.
PALETTE: dict[str, tuple[str, str]] = {
    "bg": ("#f6f8fa", "#161b22"),
    "fg": ("#1f2328", "#e6edf3"),
    "border": ("#d0d7de", "#3d444d"),
    "kw": ("#cf222e", "#ff7b72"),
    "str": ("#0a3069", "#a5d6ff"),
    "num": ("#0550ae", "#79c0ff"),
    "com": ("#57606a", "#9198a1"),
    "fn": ("#6639ba", "#d2a8ff"),
    "ns": ("#953800", "#ffa657"),
    "add-bg": ("#dafbe1", "#12261e"),
    "rem-bg": ("#ffebe9", "#2d1619"),
    "hunk-bg": ("#ddf4ff", "#172334"),
    "add-mark": ("#116329", "#7ee787"),
    "rem-mark": ("#82071e", "#ffa198"),
    "title-bg": ("#eaeef2", "#21262d"),
}
TOKEN_CLASSES = ("kw", "str", "num", "com", "fn", "ns")
MONO = ("ui-monospace, SFMono-Regular, Menlo, Consolas, 'DejaVu Sans Mono', 'Liberation Mono', "
        "monospace")
FONT = f"var(--jp-code-font-family, var(--vscode-editor-font-family, {MONO}))"
FONT_SIZE = "var(--jp-code-font-size, var(--vscode-editor-font-size, 13px))"


def _vars(which: int) -> str:
    return ";".join(f"--tdsl-{name}:{colours[which]}" for name, colours in PALETTE.items())


def _var(name: str) -> str:
    return f"var(--tdsl-{name},{PALETTE[name][0]})"


_LIGHT_SCOPES = ('body[data-jp-theme-light="true"] .tdsl', "body.vscode-light .tdsl",
                 "body.vscode-high-contrast-light .tdsl", ".tdsl.tdsl-light")
_DARK_SCOPES = ('body[data-jp-theme-light="false"] .tdsl', "body.vscode-dark .tdsl",
                "body.vscode-high-contrast:not(.vscode-high-contrast-light) .tdsl", ".tdsl.tdsl-dark")

STYLE = (
    "<style>"
    f".tdsl{{{_vars(0)}}}"
    f"@media (prefers-color-scheme: dark){{.tdsl{{{_vars(1)}}}}}"
    f"{','.join(_LIGHT_SCOPES)}{{{_vars(0)}}}"
    f"{','.join(_DARK_SCOPES)}{{{_vars(1)}}}"
    + "".join(f".tdsl .tdsl-{c}{{color:var(--tdsl-{c})}}" for c in TOKEN_CLASSES)
    + ".tdsl .tdsl-kw{font-weight:600}.tdsl .tdsl-com{font-style:italic}"
    ".tdsl .tdsl-add{background:var(--tdsl-add-bg)}.tdsl .tdsl-rem{background:var(--tdsl-rem-bg)}"
    ".tdsl .tdsl-hunk{background:var(--tdsl-hunk-bg)}"
    ".tdsl .tdsl-add .tdsl-mark{color:var(--tdsl-add-mark)}.tdsl .tdsl-rem .tdsl-mark{color:var(--tdsl-rem-mark)}"
    ".tdsl .tdsl-title{background:var(--tdsl-title-bg)}"
    "</style>"
)

# the box: the notebook's code font, no wrapping, sideways scroll; inline so that no notebook
# stylesheet (JupyterLab's `.jp-RenderedHTMLCommon pre`, nbconvert's) can change it
_BOX = (f"background:{_var('bg')};color:{_var('fg')};border:1px solid {_var('border')};border-radius:4px;"
        "overflow-x:auto;max-width:100%;margin:0.25em 0;padding:0;text-align:left")
_CODE = (f"font-family:{FONT};font-size:{FONT_SIZE};line-height:1.45;white-space:pre;word-wrap:normal;"
         "overflow-wrap:normal;tab-size:4;margin:0;padding:0.5em 0.75em;background:transparent;color:inherit;"
         "border:0;display:block;box-sizing:border-box;")
_TEXT = (f"font-family:{FONT};font-size:{FONT_SIZE};line-height:1.45;white-space:pre;word-wrap:normal;"
         "overflow-wrap:normal;")
# a diff row: a block inside the <pre> (whitespace stays whitespace only inside <pre>: exporters
# such as nbconvert re-serialise the page and collapse whitespace-only text elsewhere)
_LINE = "display:block;white-space:pre;padding:0 0.75em"


# ----------------------------------------------------------------------------- tokens

def _token_class(kind) -> str | None:
    from pygments.token import Comment, Keyword, Name, Number, Operator, String

    if kind in Comment:
        return "com"
    if kind in String:
        return "str"
    if kind in Number:
        return "num"
    if kind in Keyword or kind in Operator.Word:
        return "kw"
    if kind in Name.Function or kind in Name.Decorator or kind in Name.Class:
        return "fn"
    if kind in Name.Builtin:
        return "ns"
    return None


def highlighted_lines(text: str) -> list[str]:
    """Each line of `text` as HTML with its tokens in <span class="tdsl-..."> (escaped).

    `T` and the attribute chain after it (`T.axis.remap`) are one "ns" token: the DSL's names."""
    try:
        from pygments.lexers import PythonLexer
        from pygments.token import Name, Operator
    except ImportError:  # pygments comes with rich; stay plain without it
        return [html.escape(line) for line in text.split("\n")]
    tokens = list(PythonLexer(stripnl=False, ensurenl=False).get_tokens(text))
    lines: list[list[tuple[str | None, str]]] = [[]]
    in_t_chain = False
    for index, (kind, value) in enumerate(tokens):
        cls = _token_class(kind)
        nxt = tokens[index + 1][1] if index + 1 < len(tokens) else ""
        if kind in Name and value == "T" and nxt == ".":
            cls, in_t_chain = "ns", True
        elif in_t_chain and (kind in Name or (kind in Operator and value == ".")):
            cls = "ns"
        else:
            in_t_chain = False
        for k, piece in enumerate(value.split("\n")):
            if k:
                lines.append([])
            if piece:
                line = lines[-1]
                if line and line[-1][0] == cls:   # one span for `T.axis.remap`, not five
                    line[-1] = (cls, line[-1][1] + piece)
                else:
                    line.append((cls, piece))
    return ["".join(f'<span class="tdsl-{cls}">{html.escape(piece, quote=False)}</span>' if cls
                    else html.escape(piece, quote=False) for cls, piece in line) for line in lines]


# ----------------------------------------------------------------------------- fragments

def _box(inner: str, kind: str, label: str) -> str:
    # the inner div is as wide as the widest line, so every bar (title, hunk, +/-) spans it
    return (f'{STYLE}<div class="tdsl tdsl-{kind}" role="region" aria-label="{html.escape(label)}" '
            f'style="{_BOX}"><div style="min-width:max-content">{inner}</div></div>')


def _title(lines: Sequence[str]) -> str:
    if not lines:
        return ""
    body = "\n".join(html.escape(line, quote=False) for line in lines)
    return (f'<pre class="tdsl-title" style="{_TEXT}padding:0.35em 0.75em;margin:0;'
            f'background:{_var("title-bg")};color:inherit;border:0;border-bottom:1px solid {_var("border")};'
            f'border-radius:0">{body}</pre>')


def script_html(text: str, title: Sequence[str] = ()) -> str:
    """Script text as a highlighted, self-styled HTML fragment; `title`: header lines above it."""
    lines = highlighted_lines(text.rstrip("\n"))
    code = f'<pre class="tdsl-code" style="{_CODE}">' + "\n".join(lines) + "</pre>"
    return _box(_title(title) + code, "script", title[0] if title else "tdsl script")


def diff_html(before: str, after: str, title: Sequence[str] = (), context: int = 3) -> str:
    """A unified diff of two script texts as HTML: both sides highlighted, removed lines on red,
    added on green, hunk headers on blue, each bar as wide as the widest line; `title`: header
    lines (the steps the diff covers)."""
    old, new = before.rstrip("\n").split("\n"), after.rstrip("\n").split("\n")
    old_html, new_html = highlighted_lines("\n".join(old)), highlighted_lines("\n".join(new))
    rows: list[str] = []

    def row(cls: str, mark: str, content: str) -> None:
        rows.append(f'<span class="tdsl-{cls}" style="{_LINE}"><span class="tdsl-mark">{mark}</span>'
                    f"{content}\n</span>")

    for group in difflib.SequenceMatcher(None, old, new, autojunk=False).get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        rows.append(f'<span class="tdsl-hunk" style="{_LINE}">@@ -{_range(i1, i2)} +{_range(j1, j2)} @@\n</span>')
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                for k in range(a1, a2):
                    row("ctx", " ", old_html[k])
                continue
            for k in range(a1, a2):
                row("rem", "-", old_html[k])
            for k in range(b1, b2):
                row("add", "+", new_html[k])
    if not rows:
        rows.append(f'<span class="tdsl-ctx" style="{_LINE}">(no change)\n</span>')
    code = (f'<pre class="tdsl-code" style="{_CODE}padding:0.5em 0">' + "".join(rows) + "</pre>")
    return _box(_title(title) + code, "diff", title[0] if title else "tdsl diff")


def _range(start: int, stop: int) -> str:
    """A hunk's line range as unified diff writes it (1-based start, then length if not 1)."""
    length = stop - start
    first = start + 1 if length else start
    return f"{first}" if length == 1 else f"{first},{length}"


# ----------------------------------------------------------------------------- functions

# (id of a function, notebook cell) that `tdsl.lower(..., show=True)` displayed: when that call
# is also the cell's result, the notebook renders the result once more; it says so instead
_SHOWN: set[tuple[int, int]] = set()


def _cell() -> int:
    import sys

    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    return getattr(shell, "execution_count", -1) if shell is not None else -1


def mark_shown(func) -> None:
    """`func` was just displayed in full (lower(show=True)); its next rendering in this cell is
    one line."""
    _SHOWN.clear()
    _SHOWN.add((id(func), _cell()))


def function_html(func, title: Sequence[str] = ()) -> str:
    """A PrimFunc as HTML: its highlighted script (one line when just shown in this cell)."""
    key = (id(func), _cell())
    if key in _SHOWN:
        _SHOWN.discard(key)
        from .printer import summary

        line = f"<PrimFunc {summary(func)}> (shown above)"
        return _box(f'<pre class="tdsl-code" style="{_CODE}">{html.escape(line)}</pre>', "script", line)
    return script_html(func.script(), title)


class Shown:
    """What `tdsl.lower(..., show=True)` displays in a notebook: the script, then its notes."""

    def __init__(self, func, notes: Sequence[str]):
        self.func, self.notes = func, list(notes)

    def _repr_html_(self) -> str:
        text = func_text = self.func.script()
        if self.notes:
            text = func_text.rstrip("\n") + "\n" + "\n".join(f"# note: {n}" for n in self.notes)
        return script_html(text)
