"""Render HTML fragments in headless Chromium and read back what a reader would see.

No selenium or playwright: the page carries a script that measures itself after layout
(computed font families, every text colour against the background it is drawn on with its
WCAG contrast ratio, line heights) and writes the result as JSON into the DOM; Chromium's
`--dump-dom` prints it. `themes` says how each page asks for light or dark: JupyterLab's body
attribute, VS Code's body class, or the browser's own `prefers-color-scheme` (--force-dark-mode).
"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import tempfile

# name -> (body attributes, page background and text colour as the host would set them, chromium flags)
THEMES = {
    "jupyterlab-light": ('data-jp-theme-light="true"', "#ffffff", "rgba(0,0,0,0.87)", []),
    "jupyterlab-dark": ('data-jp-theme-light="false"', "#111111", "rgba(255,255,255,0.87)", []),
    "vscode-dark": ('class="vscode-dark"', "#1f1f1f", "#cccccc", []),
    "browser-light": ("", "#ffffff", "#000000", []),
    "browser-dark": ("", "#121212", "#e8e8e8", ["--force-dark-mode", "--blink-settings=preferredColorScheme=0"]),
}

MEASURE_JS = r"""
function rgba(s){const m=s.match(/rgba?\(([^)]+)\)/);if(!m)return null;const p=m[1].split(/[ ,\/]+/).filter(x=>x).map(Number);
  return [p[0],p[1],p[2],p.length>3?p[3]:1];}
function over(top,bottom){const a=top[3];return [0,1,2].map(i=>top[i]*a+bottom[i]*(1-a)).concat([1]);}
function background(el){const stack=[];for(let e=el;e;e=e.parentElement){const c=rgba(getComputedStyle(e).backgroundColor);
  if(c&&c[3]>0)stack.push(c);if(c&&c[3]>=1)break;}
  let bg=[255,255,255,1];for(let i=stack.length-1;i>=0;i--)bg=over(stack[i],bg);return bg;}
function lum(c){const f=v=>{v/=255;return v<=0.03928?v/12.92:Math.pow((v+0.055)/1.055,2.4);};
  return 0.2126*f(c[0])+0.7152*f(c[1])+0.0722*f(c[2]);}
function ratio(a,b){const x=lum(a),y=lum(b);return (Math.max(x,y)+0.05)/(Math.min(x,y)+0.05);}
function hex(c){return '#'+c.slice(0,3).map(v=>Math.round(v).toString(16).padStart(2,'0')).join('');}
const out={fragments:[]};
document.querySelectorAll(window.TDSL_FRAGMENTS||'[data-fragment]').forEach((frag,index)=>{
  const res={name:frag.dataset.fragment||('output '+index),pairs:{},fonts:{},whiteSpace:{},wrapped:[],scroll:null};
  const walker=document.createTreeWalker(frag.querySelector('.tdsl,.highlight')||frag,NodeFilter.SHOW_TEXT);
  while(walker.nextNode()){const t=walker.currentNode;if(!t.textContent.trim())continue;const el=t.parentElement;
    if(el.closest('style'))continue;const cs=getComputedStyle(el);
    const bg=background(el);const fg=over(rgba(cs.color),bg);const key=hex(fg)+' on '+hex(bg);
    if(!(key in res.pairs))res.pairs[key]={ratio:ratio(fg,bg),sample:t.textContent.trim().slice(0,40)};
    res.fonts[cs.fontFamily]=(res.fonts[cs.fontFamily]||0)+1;res.whiteSpace[cs.whiteSpace]=(res.whiteSpace[cs.whiteSpace]||0)+1;}
  frag.querySelectorAll('.tdsl-code, .highlight pre').forEach(code=>{
    const lineHeight=parseFloat(getComputedStyle(code).lineHeight);
    const blocks=Array.from(code.children).filter(c=>getComputedStyle(c).display==='block');
    const rows=blocks.length?blocks:[code];
    rows.forEach(r=>{const n=r===code?r.textContent.replace(/\n$/,'').split('\n').length:1;
      const inner=r.getBoundingClientRect().height-parseFloat(getComputedStyle(r).paddingTop)-parseFloat(getComputedStyle(r).paddingBottom);
      if(inner>n*lineHeight+1)res.wrapped.push(r.textContent.slice(0,60));});
    const rowWidths=rows.map(r=>Math.round(r.getBoundingClientRect().width));
    res.rowWidths=[Math.min(...rowWidths),Math.max(...rowWidths)];});
  const box=frag.querySelector('.tdsl,.highlight');
  if(box){res.scroll={scrollWidth:box.scrollWidth,clientWidth:box.clientWidth,overflowX:getComputedStyle(box).overflowX};}
  out.fragments.push(res);});
const host=window.parent.document;const pre=host.createElement('pre');pre.id='tdsl-measure-'+(document.body.dataset.theme||'page');
pre.textContent=JSON.stringify(out);host.body.appendChild(pre);
"""


def chromium() -> str | None:
    """The Chromium executable, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def page(fragments: dict[str, str], theme: str, width: int = 520, measure: bool = True) -> str:
    """An HTML page holding `fragments` (name -> HTML) as a notebook of `theme` would."""
    attrs, background, color, _ = THEMES[theme]
    body = "".join(f'<section data-fragment="{html.escape(name)}"><h3>{html.escape(name)}</h3>{frag}</section>'
                   for name, frag in fragments.items())
    script = f"<script>window.addEventListener('load',()=>{{{MEASURE_JS}}});</script>" if measure else ""
    return (f'<!doctype html><html><head><meta charset="utf-8"><style>body{{margin:16px;width:{width}px;'
            f"background:{background};color:{color};font-family:'Liberation Sans',Arial,sans-serif;"
            f"font-size:14px}}h3{{font-size:13px;margin:12px 0 4px}}</style></head><body {attrs} data-theme=\"{theme}\">"
            f"{body}"
            f"{script}</body></html>")


def _flags(theme: str) -> list[str]:
    return ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--mute-audio",
            "--no-first-run", "--disable-extensions", "--virtual-time-budget=2000", *THEMES[theme][3]]


def measure(fragments: dict[str, str], themes: tuple[str, ...] | str, width: int = 520,
            timeout: float = 90) -> dict[str, dict]:
    """Render `fragments` under each theme and return {theme: the page's own measurements (see
    MEASURE_JS)}. Themes that need the same browser flags share one Chromium run: each is a
    srcdoc iframe of one page, which writes its measurements into the parent page."""
    exe = chromium()
    assert exe is not None, "chromium is not installed"
    themes = (themes,) if isinstance(themes, str) else tuple(themes)
    groups: dict[tuple[str, ...], list[str]] = {}
    for theme in themes:
        groups.setdefault(tuple(THEMES[theme][3]), []).append(theme)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for k, members in enumerate(groups.values()):
            frames = "".join(f'<iframe data-theme="{t}" style="width:{width + 40}px;height:50px" srcdoc="'
                             f'{html.escape(page(fragments, t, width))}"></iframe>' for t in members)
            path = os.path.join(tmp, f"page{k}.html")
            with open(path, "w") as f:
                f.write(f'<!doctype html><html><head><meta charset="utf-8"></head><body>{frames}</body></html>')
            procs.append((members, subprocess.Popen(
                [exe, *_flags(members[0]), f"--user-data-dir={tmp}/profile{k}", "--dump-dom", f"file://{path}"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
        for members, proc in procs:
            out, err = proc.communicate(timeout=timeout)
            for theme in members:
                found = re.search(rf'<pre id="tdsl-measure-{theme}">(.*?)</pre>', out, re.DOTALL)
                assert found, f"chromium printed no measurements for {theme} (rc {proc.returncode}): {err[-2000:]}"
                results[theme] = json.loads(html.unescape(found.group(1)))
    return results


def measure_page(path: str, selector: str, flags: tuple[str, ...] = (), timeout: float = 90) -> dict:
    """Measure the elements `selector` picks in an existing HTML page (e.g. an nbconvert export):
    the page gets the measuring script, each picked element is one fragment."""
    exe = chromium()
    assert exe is not None, "chromium is not installed"
    with open(path) as f:
        text = f.read()
    script = (f"<script>window.TDSL_FRAGMENTS={json.dumps(selector)};"
              f"window.addEventListener('load',()=>{{{MEASURE_JS}}});</script>")
    with tempfile.TemporaryDirectory() as tmp:
        page_path = os.path.join(os.path.dirname(os.path.abspath(path)), ".measure-" + os.path.basename(path))
        with open(page_path, "w") as f:
            f.write(text.replace("</body>", script + "</body>"))
        try:
            proc = subprocess.run([exe, *_flags("browser-light"), *flags, f"--user-data-dir={tmp}/profile",
                                   "--dump-dom", f"file://{page_path}"], capture_output=True, text=True,
                                  timeout=timeout, check=False)
        finally:
            os.unlink(page_path)
    found = re.search(r'<pre id="tdsl-measure-page">(.*?)</pre>', proc.stdout, re.DOTALL)
    assert found, f"chromium printed no measurements (rc {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


def screenshot(fragments: dict[str, str], theme: str, out_png: str, width: int = 760, height: int = 900,
               timeout: float = 60) -> None:
    """Save a screenshot of `fragments` rendered under `theme`."""
    exe = chromium()
    assert exe is not None, "chromium is not installed"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "page.html")
        with open(path, "w") as f:
            f.write(page(fragments, theme, width - 40, measure=False))
        subprocess.run([exe, *_flags(theme), f"--user-data-dir={tmp}/profile", f"--window-size={width},{height}",
                        f"--screenshot={os.path.abspath(out_png)}", f"file://{path}"],
                       capture_output=True, text=True, timeout=timeout, check=True)
