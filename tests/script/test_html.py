"""The notebook HTML without a browser: palettes, escaping, inline fallbacks, what show()
displays in a notebook, repr(PrimFunc). (tests/script/test_html_browser.py renders it.)"""
from __future__ import annotations

import html
import re
from html.parser import HTMLParser

import pytest

import tdsl
from tdsl import T
from tdsl.script import highlight
from tdsl.script.html import PALETTE, STYLE, TOKEN_CLASSES, highlighted_lines


@T.prim_func
def add_one(A: T.Buffer(("n", 8), "float32"), B: T.Buffer(("n", 8), "float32")):
    for i, j in T.grid(n, 8):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] + T.float32(1)


def _luminance(colour: str) -> float:
    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (int(colour[k:k + 2], 16) / 255 for k in (1, 3, 5))
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("side", [0, 1], ids=["light", "dark"])
def test_every_palette_text_colour_meets_wcag_aa_on_every_background(side):
    texts = ["fg", *TOKEN_CLASSES, "add-mark", "rem-mark"]
    backgrounds = ["bg", "add-bg", "rem-bg", "hunk-bg", "title-bg"]
    worst = min((contrast(PALETTE[t][side], PALETTE[b][side]), t, b) for t in texts for b in backgrounds)
    assert worst[0] >= 4.5, worst


class _Styles(HTMLParser):
    def __init__(self):
        super().__init__()
        self.styles: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k == "style":
                self.styles.append((tag, v))


def test_inline_styles_parse_and_keep_a_readable_fallback():
    page = add_one._repr_html_()
    parser = _Styles()
    parser.feed(page)
    styles = dict(parser.styles)
    assert "pre" in styles and "div" in styles
    for tag, style in parser.styles:
        assert style.count("(") == style.count(")"), (tag, style)
        assert '"' not in style, (tag, style)  # a double quote would end the attribute early
    code = styles["pre"]
    assert "white-space:pre;" in code and re.search(r"font-family:var\(--jp-code-font-family, .*monospace\)\)", code)
    # without the <style> block (a sanitizer may drop it) the box keeps the light palette
    box = parser.styles[0][1]
    assert f"background:var(--tdsl-bg,{PALETTE['bg'][0]})" in box and f"color:var(--tdsl-fg,{PALETTE['fg'][0]})" in box
    assert "overflow-x:auto" in box


def test_style_follows_jupyterlab_vscode_and_the_browser():
    assert '@media (prefers-color-scheme: dark){.tdsl{' in STYLE
    assert 'body[data-jp-theme-light="false"] .tdsl' in STYLE and "body.vscode-dark .tdsl" in STYLE
    assert 'body[data-jp-theme-light="true"] .tdsl' in STYLE and "body.vscode-light .tdsl" in STYLE


def test_highlighting_escapes_and_marks_tokens():
    lines = highlighted_lines('with T.block("<b>"):  # a < b & c\n    x = T.axis.remap("SS", [i, j])')
    assert lines[0] == ('<span class="tdsl-kw">with</span> <span class="tdsl-ns">T.block</span>('
                        '<span class="tdsl-str">"&lt;b&gt;"</span>):  '
                        '<span class="tdsl-com"># a &lt; b &amp; c</span>')
    assert '<span class="tdsl-ns">T.axis.remap</span>' in lines[1]
    assert "<b>" not in "".join(lines)


def plain(page: str) -> str:
    """The text a reader sees in an HTML fragment."""
    return html.unescape(re.sub(r"<[^>]+>", "", page.split("</style>", 1)[1]))


def test_function_html_is_the_whole_script():
    assert plain(add_one._repr_html_()).strip() == add_one.script().strip()


def test_repr_is_one_line_and_str_is_the_script():
    assert repr(add_one) == "<PrimFunc add_one(A: float32[n, 8], B: float32[n, 8]), 1 block>"
    assert str(add_one) == add_one.script()
    lowered = tdsl.lower(add_one)
    assert repr(lowered).endswith(", 0 blocks, lowered>") and "\n" not in repr(lowered)


@pytest.fixture
def notebook(monkeypatch):
    """Pretend to be a Jupyter kernel: record what would be displayed."""
    shown: list = []

    def display(obj) -> bool:
        shown.append(obj)
        return True

    monkeypatch.setattr(highlight, "display_html", display)
    return shown


def test_show_displays_html_in_a_notebook(notebook, capsys):
    sch = tdsl.Schedule(add_one)
    sch.split(sch.get_loops(sch.get_block("B"))[1], factors=[None, 4])
    sch.show()
    add_one.show()
    sch.show(diff=True)
    assert capsys.readouterr().out == ""
    assert notebook[0] is sch and notebook[1] is add_one and isinstance(notebook[2], tdsl.schedule.ScriptDiff)
    assert "# Schedule of add_one, 1 step" in sch._repr_html_()


def test_lower_show_renders_once_in_a_notebook(notebook, capsys):
    lowered = tdsl.lower(add_one, show=True)
    assert capsys.readouterr().out == ""
    assert len(notebook) == 1
    assert plain(notebook[0]._repr_html_()).strip() == lowered.script().strip()
    # the cell's result (the returned function) renders as one line after the full display ...
    assert plain(lowered._repr_html_()) == f"{lowered!r} (shown above)"
    # ... once: displaying it again shows the script
    assert plain(lowered._repr_html_()).strip() == lowered.script().strip()


def test_outside_a_notebook_show_prints(capsys):
    assert not highlight.in_notebook()
    tdsl.lower(add_one, show=True)
    assert capsys.readouterr().out == tdsl.lower(add_one).script()


class _Whitespace(HTMLParser):
    """Whitespace-only text outside <pre>: exporters that re-serialise HTML (nbconvert through
    BeautifulSoup) collapse it, which would eat a diff line's indentation."""

    def __init__(self):
        super().__init__()
        self.depth, self.bad = 0, []

    def handle_starttag(self, tag, attrs):
        self.depth += tag == "pre"

    def handle_endtag(self, tag):
        self.depth -= tag == "pre"

    def handle_data(self, data):
        if data and not data.strip() and self.depth == 0:
            self.bad.append(data)


def test_indentation_lives_inside_pre_only():
    sch = tdsl.Schedule(add_one)
    mark = sch.checkpoint()
    i, j = sch.get_loops(sch.get_block("B"))
    sch.split(j, factors=[None, 4])
    sch.reorder(i, sch.get_loops(sch.get_block("B"))[1])
    for page in (add_one._repr_html_(), sch._repr_html_(), sch.diff(since=mark)._repr_html_()):
        parser = _Whitespace()
        parser.feed(page)
        assert parser.depth == 0 and parser.bad == []
