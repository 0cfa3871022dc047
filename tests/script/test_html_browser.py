"""The notebook HTML as a reader sees it: rendered by headless Chromium in light and dark
themes (JupyterLab, VS Code, the browser's prefers-color-scheme), measured by the page itself.

Skips, saying why, when Chromium is not installed (.ci/run installs Debian's `chromium`)."""
import pytest
from chromium import chromium, measure

import tdsl
from tdsl import T

pytestmark = pytest.mark.skipif(chromium() is None, reason="headless Chromium is not installed "
                                "(apt-get install chromium): the notebook HTML was not rendered")

THEMES_CHECKED = ("jupyterlab-light", "jupyterlab-dark", "vscode-dark", "browser-dark")


@T.prim_func
def scale_rows(A: T.Buffer((32, 48), "float32"), scale_factor_per_row: T.Buffer((32,), "float32"),
               B_output_with_a_rather_long_name: T.Buffer((32, 48), "float32")):
    for i, j in T.grid(32, 48):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B_output_with_a_rather_long_name[vi, vj] = A[vi, vj] * scale_factor_per_row[vi] + T.float32(1.5)


@pytest.fixture(scope="module")
def rendered():
    sch = tdsl.Schedule(scale_rows)
    mark = sch.checkpoint("tiles")
    i, j = sch.get_loops(sch.get_block("B"))
    _, j1 = sch.split(j, factors=[None, 8])
    sch.vectorize(j1)
    sch.parallel(i)
    fragments = {"function": scale_rows._repr_html_(), "schedule": sch._repr_html_(),
                 "diff": sch.diff(since=mark)._repr_html_()}
    return measure(fragments, THEMES_CHECKED, width=420)


def _fragments(rendered):
    for theme, result in rendered.items():
        for frag in result["fragments"]:
            yield theme, frag


def test_every_text_colour_has_aa_contrast(rendered):
    seen = 0
    for theme, frag in _fragments(rendered):
        for pair, info in frag["pairs"].items():
            seen += 1
            assert info["ratio"] >= 4.5, f"{theme} {frag['name']}: {pair} ({info['sample']!r}) has contrast " \
                                         f"{info['ratio']:.2f} < 4.5"
    assert seen >= 4 * 3 * 5   # themes x fragments x (keyword, name, number, string, plain, ...)


def test_dark_themes_draw_dark_boxes(rendered):
    # the colours must follow the theme: light text on dark in the dark themes, and vice versa
    for theme, frag in _fragments(rendered):
        plain = [pair for pair in frag["pairs"] if pair.endswith(("#161b22", "#f6f8fa"))]
        assert plain, f"{theme} {frag['name']}: no text on the box background: {list(frag['pairs'])}"
        want = "#161b22" if "dark" in theme else "#f6f8fa"
        assert all(p.endswith(want) for p in plain), f"{theme} {frag['name']}: {plain}"


def test_code_is_monospace_and_never_wraps(rendered):
    for theme, frag in _fragments(rendered):
        assert frag["fonts"], frag
        for family in frag["fonts"]:
            assert family.rstrip().endswith("monospace"), f"{theme} {frag['name']}: font-family {family}"
        assert set(frag["whiteSpace"]) == {"pre"}, f"{theme} {frag['name']}: {frag['whiteSpace']}"
        assert frag["wrapped"] == [], f"{theme} {frag['name']}: wrapped lines {frag['wrapped']}"
        scroll = frag["scroll"]
        assert scroll["overflowX"] == "auto" and scroll["scrollWidth"] > scroll["clientWidth"], \
            f"{theme} {frag['name']}: the long line should scroll the box sideways: {scroll}"
        low, high = frag["rowWidths"]
        assert low == high and high >= scroll["scrollWidth"] - 2, \
            f"{theme} {frag['name']}: line bars should all be as wide as the widest line: {frag['rowWidths']}"

