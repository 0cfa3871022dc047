"""Screenshots (and measurements) of a tutorial as a notebook, in JupyterLab's light and dark themes.

    python3 -m venv --system-site-packages /tmp/nbvenv
    /tmp/nbvenv/bin/pip install jupytext nbconvert ipykernel        # dev tools, not tdsl deps
    /tmp/nbvenv/bin/python docs/images/make_notebook_screenshots.py [--tutorial tutorials/02_cpu_matmul.py]

The tutorial is converted with jupytext, executed by nbconvert (TDSL_TUTORIAL_SMALL=1, this
checkout on PYTHONPATH) and exported to HTML with nbconvert's lab template in its light and
dark themes; headless Chromium renders each page, measures every HTML output (fonts, the
contrast of every text colour on its background, wrapped lines: tests/chromium.py) and takes
a screenshot from the cell whose markdown heading starts with --from. `--pythonpath` runs
another checkout (the "before" numbers of the closing note used the main branch).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import chromium

OUTPUTS = '.jp-OutputArea-output[data-mime-type="text/html"]'
CROP_JS = """<script>window.addEventListener('load',()=>{const want=%r;
const cells=Array.from(document.querySelectorAll('.jp-Cell'));
const first=cells.findIndex(c=>c.classList.contains('jp-MarkdownCell')&&c.textContent.trim().startsWith(want));
if(first>0)cells.slice(0,first).forEach(c=>c.remove());});</script>"""


def run(cmd: list[str], env: dict | None = None) -> None:
    subprocess.run(cmd, check=True, env=env, capture_output=True, text=True)


def summary(result: dict) -> list[str]:
    lines = []
    for frag in result["fragments"]:
        if not frag["pairs"]:
            continue
        worst = min(frag["pairs"].items(), key=lambda kv: kv[1]["ratio"])
        fonts = sorted(frag["fonts"])
        mono = all(f.rstrip().endswith("monospace") for f in fonts)
        lines.append(f"{frag['name']:>10}: min contrast {worst[1]['ratio']:5.2f} ({worst[0]}, "
                     f"{worst[1]['sample']!r}); monospace everywhere: {mono}; wrapped lines: {len(frag['wrapped'])}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tutorial", default=os.path.join(ROOT, "tutorials", "02_cpu_matmul.py"))
    ap.add_argument("--pythonpath", default=ROOT)
    ap.add_argument("--from", dest="start", default="1. Tile for the caches")
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--no-screenshots", action="store_true")
    args = ap.parse_args()
    bindir = os.path.dirname(sys.executable)
    stem = os.path.splitext(os.path.basename(args.tutorial))[0]
    with tempfile.TemporaryDirectory() as tmp:
        nb = os.path.join(tmp, f"{stem}.ipynb")
        run([os.path.join(bindir, "jupytext"), "--to", "ipynb", "-o", nb, args.tutorial])
        env = dict(os.environ, PYTHONPATH=args.pythonpath, TDSL_TUTORIAL_SMALL="1",
                   TDSL_CACHE_DIR=os.path.join(tmp, "cache"))
        run([os.path.join(bindir, "jupyter"), "nbconvert", "--to", "notebook", "--execute", "--inplace",
             "--ExecutePreprocessor.timeout=900", nb], env=env)
        for theme in ("light", "dark"):
            page = os.path.join(tmp, f"{stem}_{theme}.html")
            run([os.path.join(bindir, "jupyter"), "nbconvert", "--to", "html", f"--HTMLExporter.theme={theme}",
                 "--output", page, nb])
            print(f"nbconvert lab template, {theme} theme:")
            print("\n".join(summary(chromium.measure_page(page, OUTPUTS))))
            if args.no_screenshots:
                continue
            with open(page) as f:
                text = f.read().replace("</body>", CROP_JS % args.start + "</body>")
            with open(page, "w") as f:
                f.write(text)
            png = os.path.join(args.out, f"notebook_{stem}_{theme}.png")
            subprocess.run([chromium.chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                            "--window-size=960,1500", "--virtual-time-budget=3000", f"--user-data-dir={tmp}/p",
                            f"--screenshot={png}", f"file://{page}"], check=True, capture_output=True)
            print("wrote", os.path.relpath(png, ROOT))


if __name__ == "__main__":
    main()
