"""Build the reading copy: every committed lesson as a static HTML page, and an index.

    python scripts/build_html.py [--out DIR] [--notebooks DIR]      (default: build/html/, notebooks/)

The pages are made by nbconvert from the committed, executed notebooks (notebooks/*.ipynb): nothing
is executed, so the reading copy shows exactly the outputs that strict nbval checks. ``index.html``
lists the lessons in order with their titles, their header line (reading and exercise minutes) and
a link to each page.

Diagrams (```mermaid blocks) are drawn in the reader's browser by mermaid, and must be drawn with the
network off (a workshop room without Wi-Fi, a copy on a USB stick opened from the file system).
nbconvert's own page loads mermaid from a CDN, so this script fetches mermaid's browser bundle once,
from the npm registry, with ``npm pack`` (the pinned version below, the one JupyterLab 4.6.6 itself
draws with), checks the tarball against its pinned sha512, keeps it in build/cache/, and copies the
bundle and its licence beside the pages. The pages then load nothing from the network: MathJax and
require.js (for math and widgets, which no lesson uses) are left out; if a lesson ever uses math,
MathJax is kept from its CDN and the script says so. Without npm, the pages are built with mermaid
from nbconvert's CDN address and a warning says that the diagrams then need the network.

A notebook's own HTML (its Markdown cells and its outputs) is cleaned before it reaches a page:
the pages are opened from the file system, where a script from a notebook would run with the
reader's rights over that file system's pages. Only the tags, attributes and link schemes of
:data:`TAGS`, :data:`ATTRIBUTES` and :data:`PROTOCOLS` are kept (text, tables, details, images,
links to http(s), mailto or a relative address); anything else is shown as text, never run. A
style sheet keeps only rules that style (:func:`clean_sheet`).

Every lesson's page has a bar at its top and bottom: the previous lesson, the index, the next
lesson (``rel="prev"``/``rel="next"``). A lesson's closing "**Next:** 06_single_receipt" becomes a link
to that page; a notebook whose "Next:" is already a Markdown link to ``06_single_receipt.ipynb`` keeps
it, pointed at ``06_single_receipt.html`` (as every link to a lesson's .ipynb is); so do the lesson
names after "Prerequisites:" in each header line, on the page and in the index. The index has a
search box: ``search-index.js`` holds each page's h1-h3 sections (heading, anchor, the first
:data:`SEARCH_TEXT_CHARS` characters of text; about 350 kB for the 15 lessons) and ``search.js``
(about 50 lines, no library, no network) lists the sections holding every word typed, headings first.
It is a script file setting a global rather than a JSON file, because a page opened from the file
system may not fetch() one; results are built with textContent, so a lesson's text is never HTML.

Why this script and not Jupyter Book / MyST (measured 2026-12-06, this machine, 2 shared cores):
- Jupyter Book 1.0.4 (Sphinx 7.4, MyST-NB 1.4) installs beside requirements.txt with no pin changed
  (``pip install -r requirements.txt "jupyter-book<2"``: 275 s; the venv grows to 716 MB against
  .venv's 655 MB) and builds the 15 committed lessons without executing them in 7 s (this script:
  about 50 s, nbconvert once per lesson); its site is 9.6 MB (this one: 5.7 MB with mermaid).
  It gives navigation and search for free. But as built it misses three things this script does:
  the diagrams (its ```mermaid blocks stay code, 13 warnings "Pygments lexer name 'mermaid'";
  drawing them needs sphinxcontrib-mermaid, which loads mermaid from a CDN unless configured), the
  cleaning of a notebook's own HTML (MyST-NB writes HTML outputs as they are; the tests here plant
  scripts and handlers that must not run from a page opened from the file system), and the
  owned-output-folder rules; its pages also link thebe from unpkg.com. Closing those gaps, and
  adding Sphinx's ~60 MB to the developers' requirements, costs more than the half hour this
  decision was allowed.
- Jupyter Book 2 (2.1.7, MyST's Node.js toolchain) needs Node and downloads its site theme when
  it builds: not a build that works offline, so not measured further.
So the hand-written builder stays; the navigation and search above are what Jupyter Book would add.

The output folder is the script's own: it writes into a new or empty folder, or one it built
before (its marker, ``.reading-copy.json``, lists what that build wrote), and then removes only
those files. A folder holding anything else is refused (exit 2, one line) and left as it was.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html
import json
import re
import shutil
import subprocess
import sys
import tarfile
from html.parser import HTMLParser
from pathlib import Path

import bleach
import jinja2
import nbformat
import tinycss2
from bleach.css_sanitizer import ALLOWED_CSS_PROPERTIES, CSSSanitizer
from nbconvert import HTMLExporter
from nbconvert.filters.markdown_mistune import markdown2html_mistune

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
CACHE = ROOT / "build" / "cache" / "mermaid"
#: In an output folder, the list of the files the build that made it wrote there.
MARKER = ".reading-copy.json"

MERMAID_VERSION = "11.16.1"
MERMAID_INTEGRITY = "sha512-TQsq6u22fAn3rek5VOubrhKPo1g5hwC3FXUN9hiyupTckcYiGuuKGkNQrKYwGJkXUxZdojwRG46gsSCFZMDp4g=="
MERMAID_DIR = "mermaid"  # under the output folder: mermaid.min.js and its LICENSE

# The lab template's page, with its mermaid loader fed from a local classic script. A page opened
# from the file system may not import ES modules from files (Chromium refuses them as cross-origin),
# so mermaid's self-contained bundle is loaded with <script src>, and nbconvert's own rendering code
# (the mermaid_js macro) imports it through a one-line module that hands over window.mermaid. The
# bundle would also draw every .mermaid element by itself on the page's load event, racing that
# code (which then reads the finished SVG as a diagram's source): startOnLoad is turned off first.
READING_TEMPLATE = """\
{%- extends 'index.html.j2' -%}
{%- from 'mermaidjs.html.j2' import mermaid_js -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}
{%- if resources.reading_copy_math -%}{{ super() }}{%- endif -%}
{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}
{%- if resources.reading_copy_mermaid_script -%}
<script src="{{ resources.reading_copy_mermaid_script }}"></script>
<script>globalThis.mermaid.startOnLoad = false; /* nbconvert's code below draws the diagrams */</script>
{{ mermaid_js("data:text/javascript,export%20default%20globalThis.mermaid;", "") }}
{%- else -%}
{{ super() }}
{%- endif -%}
{%- endblock html_head_js_mermaidjs -%}
"""


class Refused(Exception):
    """Bad input: one line on stderr, exit 2, nothing changed."""


def lessons(folder: Path = NOTEBOOKS) -> list[Path]:
    return sorted(folder.glob("[0-9]*.ipynb"))


# --------------------------------------------------------------------------- a notebook's own HTML, cleaned

#: The tags a notebook's Markdown and outputs may use on a page: text, lists, code, tables (pandas
#: frames and stylers), details, images. Any other tag (script, iframe, object, form, svg ...) is
#: shown as text.
TAGS = frozenset({
    "a", "abbr", "b", "blockquote", "br", "caption", "code", "col", "colgroup", "dd", "del", "details", "div",
    "dl", "dt", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins", "kbd", "li", "ol", "p", "pre",
    "q", "s", "samp", "small", "span", "strong", "style", "sub", "summary", "sup", "table", "tbody", "td",
    "tfoot", "th", "thead", "tr", "u", "ul",
})
#: Their attributes: no event handler (onerror=, onclick=) is among them.
ATTRIBUTES = {
    "*": ["class", "id", "title", "style"],
    "a": ["href"],
    "img": ["src", "alt", "width", "height"],
    "table": ["border"],
    "th": ["colspan", "rowspan", "halign", "valign"],
    "td": ["colspan", "rowspan"],
    "details": ["open"],
    "ol": ["start"],
}
#: The schemes a link or an image may name; a relative address (another lesson, an anchor) has none.
PROTOCOLS = frozenset({"http", "https", "mailto"})
#: The only functions a kept style value may call: colours, which fetch nothing.
_CSS_FUNCTIONS = frozenset({"rgb", "rgba", "hsl", "hsla"})


def clean_html(text: object) -> str:
    """A notebook's own HTML as a page may hold it: :data:`TAGS`, :data:`ATTRIBUTES` and :data:`PROTOCOLS` only.

    Used by nbconvert's templates wherever they place a notebook's HTML (they call this filter
    ``clean_html``): Markdown cells once rendered, HTML and Markdown outputs, raw cells, highlighted
    code. A diagram's source is made text first, so that it reaches mermaid as written.
    """
    text = text.decode() if isinstance(text, bytes) else str(text)
    cleaned = bleach.clean(_escape_mermaid_sources(text), tags=TAGS, attributes=ATTRIBUTES, protocols=PROTOCOLS,
                           strip_comments=True, css_sanitizer=CSSSanitizer())
    # bleach keeps an allowed <style> element with its sheet unchecked (and '>' escaped, which breaks
    # a selector). Its output writes every '<' of text and attributes as '&lt;' and the element bare
    # (no attribute is allowed on it), so this finds exactly the style elements it kept.
    return re.sub(r"<style>(.*?)</style>", lambda sheet: f"<style>{clean_sheet(html.unescape(sheet[1]))}</style>",
                  cleaned, flags=re.S)


def clean_sheet(sheet: str) -> str:
    """The rules of a style sheet that only style: a selector, then declarations of the properties bleach
    allows in a style attribute, with no url() and no function but a colour's. @-rules (@import,
    @font-face, which fetch) are dropped; so is a rule whose text holds a '<', which could end the element."""
    kept = []
    for rule in tinycss2.parse_stylesheet(sheet, skip_comments=True, skip_whitespace=True):
        if rule.type != "qualified-rule":
            continue
        declarations = [
            f"{item.lower_name}: {tinycss2.serialize(item.value).strip()}{' !important' if item.important else ''}"
            for item in tinycss2.parse_declaration_list(rule.content, skip_comments=True, skip_whitespace=True)
            if item.type == "declaration" and item.lower_name in ALLOWED_CSS_PROPERTIES and _fetches_nothing(item.value)
        ]
        text = f"{tinycss2.serialize(rule.prelude).strip()} {{ {'; '.join(declarations)} }}"
        if declarations and "<" not in text:
            kept.append(text)
    return "".join(f"\n{text}" for text in kept) + "\n" * bool(kept)


def _fetches_nothing(tokens) -> bool:
    for token in tokens:
        if token.type == "function":
            if token.lower_name not in _CSS_FUNCTIONS or not _fetches_nothing(token.arguments):
                return False
        elif token.type not in ("ident", "hash", "number", "percentage", "dimension", "whitespace", "literal", "string"):
            return False  # url(), a block, a parse error
    return True


def _integrity(path: Path) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


def fetch_mermaid() -> Path | None:
    """The pinned mermaid tarball from the npm registry (cached under build/), or None without npm."""
    tarball = CACHE / f"mermaid-{MERMAID_VERSION}.tgz"
    if tarball.exists() and _integrity(tarball) == MERMAID_INTEGRITY:
        print(f"mermaid {MERMAID_VERSION}: using {tarball.relative_to(ROOT)} (sha512 checked)")
        return tarball
    npm = shutil.which("npm")
    if npm is None:
        return None
    CACHE.mkdir(parents=True, exist_ok=True)
    print(f"mermaid {MERMAID_VERSION}: npm pack mermaid@{MERMAID_VERSION} (from the npm registry, about 18 MB, once)")
    done = subprocess.run(
        [npm, "pack", f"mermaid@{MERMAID_VERSION}", "--json", "--pack-destination", str(CACHE)],
        capture_output=True, text=True, timeout=600,
    )
    if done.returncode != 0 or not tarball.exists():
        print(f"warning: npm pack failed ({done.returncode}): {done.stderr.strip()[-500:]}", file=sys.stderr)
        return None
    if _integrity(tarball) != MERMAID_INTEGRITY:
        tarball.unlink()
        raise SystemExit(f"mermaid-{MERMAID_VERSION}.tgz does not match its pinned sha512: refusing it")
    return tarball


def install_mermaid(tarball: Path, out: Path) -> str:
    """Copy the browser bundle and its licence out of the tarball; return the page-relative script path."""
    target = out / MERMAID_DIR
    target.mkdir(exist_ok=True)
    with tarfile.open(tarball) as archive:
        for member, name in (("package/dist/mermaid.min.js", "mermaid.min.js"), ("package/LICENSE", "LICENSE")):
            source = archive.extractfile(member)
            if source is None:
                raise SystemExit(f"{tarball.name} has no {member}")
            with (target / name).open("xb") as copy:  # a new file: see write_new
                copy.write(source.read())
    return f"{MERMAID_DIR}/mermaid.min.js"


def _markdown_sources(notebook) -> list[str]:
    return [cell.source for cell in notebook.cells if cell.cell_type == "markdown"]


def uses_math(notebook) -> bool:
    """True when a Markdown cell holds TeX math ($...$, $$...$$, \\(...\\)), which needs MathJax."""
    return any(re.search(r"\$[^$\n]+\$|\\\(", source) for source in _markdown_sources(notebook))


def title_and_header(notebook, fallback: str) -> tuple[str, str]:
    """The lesson's '# ' title and its 'Reading ... min' header line, from its first Markdown cell."""
    first = next(iter(_markdown_sources(notebook)), "")
    title = next((line[2:].strip() for line in first.splitlines() if line.startswith("# ")), fallback)
    header = next((line.strip() for line in first.splitlines() if line.strip().startswith("Reading ")), "")
    return title, header


def _inline_markdown(text: str) -> str:
    rendered = markdown2html_mistune(text).strip()
    return re.sub(r"^<p>(.*)</p>$", r"\1", rendered, flags=re.S)


def _escape_mermaid_sources(body: str) -> str:
    """Write each diagram's source as text, so that the browser hands mermaid exactly what the cell holds.

    nbconvert puts the source in <pre class="mermaid"> with ``-->`` escaped but a ``<br/>`` (a line
    break inside a label) left as markup: the browser makes it an element, mermaid reads the
    element's text, and the label loses its line breaks.
    """
    def escape(match: re.Match) -> str:
        return match[1] + html.escape(html.unescape(match[2]), quote=False) + match[3]
    return re.sub(r'(<pre class="mermaid">)(.*?)(</pre>)', escape, body, flags=re.S)


def _link_lessons(body: str, stems: set[str]) -> str:
    """A link from one lesson to another (href="02_three_states.ipynb") points at its page."""
    def swap(match: re.Match) -> str:
        return f'href="{match[1]}.html{match[2] or ""}"' if match[1] in stems else match[0]
    return re.sub(r'href="([^"/#:]+)\.ipynb(#[^"]*)?"', swap, body)


def _link_next(body: str, stems: set[str]) -> str:
    """ "Next: 03_durable_checkpoint" written as plain text becomes a link to that page.

    A notebook whose "Next:" is already a Markdown link (``[03_durable_checkpoint](03_durable_checkpoint.ipynb)``)
    keeps it: :func:`_link_lessons` points it at the page, and the text after "Next:" is then a link, not a name.
    """
    def swap(match: re.Match) -> str:
        return f'{match[1]}<a href="{match[2]}.html">{match[2]}</a>' if match[2] in stems else match[0]
    return re.sub(r"(Next:(?:</strong>|</b>)?\s*)(\d\d_[A-Za-z0-9_]+)\b", swap, body)


def _link_prerequisites(text: str, stems: set[str]) -> str:
    """The lesson names after "Prerequisites:" (up to the paragraph's end) become links to their pages,
    unless that list already holds a link (a notebook that writes them as Markdown links)."""
    def names(match: re.Match) -> str:
        if "<a " in match[2]:
            return match[0]
        linked = re.sub(r"\b(\d\d_[A-Za-z0-9_]+)\b",
                        lambda name: f'<a href="{name[1]}.html">{name[1]}</a>' if name[1] in stems else name[0], match[2])
        return match[1] + linked
    return re.sub(r"(Prerequisites:)(.*?)(?=</p>|<br|</span>|$)", names, text, flags=re.S | re.M)


NAV_STYLE = """<style>
nav.reading-nav { display: flex; gap: 1rem; justify-content: space-between; align-items: baseline;
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; font-size: 0.95rem;
  max-width: 1100px; margin: 0.8rem auto; padding: 0.4rem 1rem; border: 1px solid #ddd; border-radius: 6px; }
nav.reading-nav a { text-decoration: none; }
nav.reading-nav .prev, nav.reading-nav .next { flex: 1; }
nav.reading-nav .next { text-align: right; }
</style>"""


def navigation(place: str, previous: tuple[str, str] | None, following: tuple[str, str] | None) -> str:
    """The bar at the top and bottom of a lesson's page: the previous lesson, the index, the next lesson.

    ``previous`` and ``following`` are (page, title) or None at either end of the course.
    """
    def link(rel: str, item: tuple[str, str] | None, arrow: str) -> str:
        if item is None:
            return f'<span class="{rel}"></span>'
        text = f"← {html.escape(item[1])}" if arrow == "←" else f"{html.escape(item[1])} →"
        return f'<a class="{rel}" rel="{rel}" href="{html.escape(item[0])}">{text}</a>'
    return (f'<nav class="reading-nav {place}" aria-label="lessons">{link("prev", previous, "←")}'
            f'<a class="index" href="index.html">All lessons (index)</a>{link("next", following, "→")}</nav>')


def add_navigation(body: str, previous: tuple[str, str] | None, following: tuple[str, str] | None) -> str:
    body = body.replace("</head>", NAV_STYLE + "\n</head>", 1)
    body = re.sub(r"(<body[^>]*>)", lambda m: m[1] + "\n" + navigation("top", previous, following), body, count=1)
    head, _, tail = body.rpartition("</body>")
    return head + navigation("bottom", previous, following) + "\n</body>" + tail


class _Sections(HTMLParser):
    """A page's text cut at its headings (h1-h3 with an id): what the search looks through."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[dict[str, str]] = []
        self._skipping: tuple[str, int] | None = None  # (tag, depth) of a script, style or heading's pilcrow
        self._heading: str | None = None

    def handle_starttag(self, tag, attrs):
        if self._skipping:
            if tag == self._skipping[0]:
                self._skipping = (tag, self._skipping[1] + 1)
        elif tag in ("script", "style") or (tag == "a" and ("class", "anchor-link") in attrs):
            self._skipping = (tag, 1)
        elif tag in ("h1", "h2", "h3") and dict(attrs).get("id"):
            self._heading = tag
            self.sections.append({"anchor": dict(attrs)["id"] or "", "heading": "", "text": ""})

    def handle_endtag(self, tag):
        if self._skipping:
            if tag == self._skipping[0]:
                self._skipping = (tag, self._skipping[1] - 1) if self._skipping[1] > 1 else None
        elif tag == self._heading:
            self._heading = None

    def handle_data(self, data):
        if self._skipping or not self.sections:
            return
        self.sections[-1]["heading" if self._heading else "text"] += data


def search_entries(page: str, title: str, body: str) -> list[dict[str, str]]:
    """The page's sections for the search: page, lesson title, heading, anchor and text (spaces squeezed)."""
    parser = _Sections()
    parser.feed(body)
    entries = []
    for section in parser.sections:
        text = re.sub(r"\s+", " ", section["text"]).strip()[:SEARCH_TEXT_CHARS]
        entries.append({"page": page, "title": title, "heading": re.sub(r"\s+", " ", section["heading"]).strip(),
                        "anchor": section["anchor"], "text": text})
    return entries


#: The characters of each section's text the search index keeps (the start of a section says what it is about).
SEARCH_TEXT_CHARS = 3000

# The search on the index page: no network, no library. The index (search-index.js, beside the pages)
# is a classic script that sets a global, because a page opened from the file system may not fetch()
# a JSON file. Results are built with textContent only: a lesson's text is never read as HTML.
SEARCH_JS = """\
(function () {
  "use strict";
  var box = document.getElementById("search");
  var list = document.getElementById("search-results");
  var sections = window.READING_COPY_SEARCH || [];
  function snippet(text, word) {
    var at = text.toLowerCase().indexOf(word);
    if (at < 0) { return text.slice(0, 160); }
    var start = Math.max(0, at - 60);
    return (start > 0 ? "\\u2026" : "") + text.slice(start, at + 100) + "\\u2026";
  }
  function search() {
    var words = box.value.toLowerCase().split(/\\s+/).filter(function (w) { return w.length > 1; });
    list.textContent = "";
    if (words.length === 0) { return; }
    var found = [];
    sections.forEach(function (s) {
      var heading = (s.title + " " + s.heading).toLowerCase();
      var all = heading + " " + s.text.toLowerCase();
      if (!words.every(function (w) { return all.indexOf(w) >= 0; })) { return; }
      var score = words.reduce(function (n, w) { return n + (heading.indexOf(w) >= 0 ? 10 : 1); }, 0);
      found.push({s: s, score: score});
    });
    found.sort(function (a, b) { return b.score - a.score; });
    found.slice(0, 30).forEach(function (hit) {
      var item = document.createElement("li");
      var link = document.createElement("a");
      link.href = hit.s.page + "#" + hit.s.anchor;  // nbconvert writes the ids already escaped
      link.textContent = hit.s.title + " \\u203a " + hit.s.heading;
      var text = document.createElement("div");
      text.className = "snippet";
      text.textContent = snippet(hit.s.text, words[0]);
      item.appendChild(link);
      item.appendChild(text);
      list.appendChild(item);
    });
    var count = document.getElementById("search-count");
    count.textContent = found.length === 0 ? "Nothing found." :
      found.length + " section" + (found.length === 1 ? "" : "s") + (found.length > 30 ? " (first 30 shown)" : "");
  }
  box.addEventListener("input", search);
  if (box.value) { search(); }
}());
"""


INDEX = """\
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>{title}</title>
<style>
body {{ font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; max-width: 52rem;
       margin: 2rem auto; padding: 0 1rem; line-height: 1.5; color: #1b1b1b; }}
ol.lessons {{ padding-left: 0; list-style: none; }}
ol.lessons li {{ margin: 0 0 1.1rem; }}
ol.lessons a.lesson {{ font-size: 1.15rem; font-weight: 600; }}
.header {{ color: #444; font-size: 0.95rem; }}
code {{ font-size: 0.9em; background: #f3f3f3; padding: 0 0.2em; }}
footer {{ margin-top: 2rem; color: #555; font-size: 0.85rem; }}
div.search {{ margin: 1rem 0 1.5rem; }}
div.search input {{ font-size: 1rem; padding: 0.3rem 0.5rem; width: 22rem; max-width: 100%; }}
#search-count {{ color: #555; margin-left: 0.5rem; }}
#search-results li {{ margin: 0.4rem 0; }}
#search-results .snippet {{ color: #444; font-size: 0.9rem; }}
</style>
</head>
<body>
<h1>{title}</h1>
<p>The lessons as committed, with the outputs of their last run, to read before running them.
To run them yourself, clone the repository and type <code>make lab</code>.</p>
<div class="search" role="search">
<label for="search">Search the lessons:</label>
<input id="search" type="search" autocomplete="off" placeholder="e.g. lease, receipt, compare-and-set">
<span id="search-count"></span>
<ol id="search-results"></ol>
</div>
<ol class="lessons">
{items}
</ol>
<footer>{footer}</footer>
<script src="search-index.js"></script>
<script src="search.js"></script>
</body>
</html>
"""


# --------------------------------------------------------------------------- the output folder


def previous_build(out: Path) -> list[str] | None:
    """The files the build that made ``out`` wrote there (its marker), or None if none made it."""
    marker = out / MARKER
    if not marker.is_file() or marker.is_symlink():
        return None
    try:
        listed = json.loads(marker.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        listed = None
    # Only names this script writes: a marker cannot send the clean-up outside the folder.
    if not isinstance(listed, list) or not all(isinstance(name, str) and re.fullmatch(_WRITTEN, name) for name in listed):
        raise Refused(f"--out {out}: {MARKER} is not one this script wrote; give a new or empty folder")
    return listed


_WRITTEN = rf"(?:{re.escape(MERMAID_DIR)}/)?[A-Za-z0-9_][A-Za-z0-9_.-]*"


def make_room(out: Path, planned: list[str]) -> None:
    """Make ``out`` ready to receive ``planned``: a new folder, an empty one, or one this script built.

    Of a folder it built, only the files its marker lists are removed (a link among them as a link,
    never what it points at); a file of anyone else's stays. Anything else is refused before a file
    changes: a folder holding files without a marker, a symlink, or a planned name that is taken.
    """
    if out.is_symlink():
        raise Refused(f"--out {out} is a symlink; give the folder itself")
    if out.exists() and not out.is_dir():
        raise Refused(f"--out {out} is not a folder")
    if not out.exists():
        out.mkdir(parents=True)
        return
    previous = previous_build(out)
    if previous is None:
        if any(out.iterdir()):
            raise Refused(f"--out {out} holds files this script did not write (it has no {MARKER}); "
                          "give a new or empty folder, or remove it yourself")
        return
    mermaid = out / MERMAID_DIR
    if mermaid.is_symlink() or (mermaid.exists() and not mermaid.is_dir()):
        raise Refused(f"--out {out}: {MERMAID_DIR} is not a folder this script made")
    owned = [MARKER, *previous]
    taken = [name for name in planned if name not in owned and ((out / name).is_symlink() or (out / name).exists())]
    if taken:
        raise Refused(f"--out {out}: {taken[0]} is not from the last build, and this one would replace it")
    for name in owned:
        path = out / name
        if path.is_symlink() or path.is_file():
            path.unlink()
    if mermaid.is_dir() and not any(mermaid.iterdir()):
        mermaid.rmdir()


def write_new(path: Path, text: str) -> None:
    """A new file: mode "x" never writes into, nor through, whatever the name already holds."""
    with path.open("x", encoding="utf-8") as file:
        file.write(text)


# --------------------------------------------------------------------------- the build


def build(out: Path, notebooks: Path = NOTEBOOKS) -> list[Path]:
    paths = lessons(notebooks)
    if not paths:
        raise Refused(f"--notebooks {notebooks}: no [0-9]*.ipynb to build")

    tarball = fetch_mermaid()
    planned = [MARKER, *(f"{path.stem}.html" for path in paths), "index.html", "search-index.js", "search.js",
               "build-info.json"]
    if tarball is not None:
        planned += [f"{MERMAID_DIR}/mermaid.min.js", f"{MERMAID_DIR}/LICENSE"]
    make_room(out, planned)
    # The marker first: a build that stops half-way leaves a folder the next build knows as its own.
    write_new(out / MARKER, json.dumps({"files": planned[1:]}, indent=2) + "\n")

    if tarball is not None:
        script = install_mermaid(tarball, out)
        diagrams = f"diagrams drawn by mermaid {MERMAID_VERSION}, copied beside the pages: no network needed"
    else:
        script = ""
        diagrams = "diagrams drawn by mermaid from a CDN: they need the network"
        print("warning: npm is not available, so the pages load mermaid from nbconvert's CDN address "
              "and the diagrams need the network to be drawn", file=sys.stderr)

    exporter = HTMLExporter(
        template_name="lab",
        extra_loaders=[jinja2.DictLoader({"reading_copy.html.j2": READING_TEMPLATE})],
        template_file="reading_copy.html.j2",
        mermaid_layout_elk_js_url="",  # no lesson uses the ELK layout; its CDN import would fail offline
        # The templates pass a notebook's own HTML through the filter named clean_html when asked to
        # sanitize (and drop JavaScript outputs); nbconvert's own filter keeps too little for the
        # lessons (no headings, no paragraphs), so this script's takes its name.
        sanitize_html=True,
        filters={"clean_html": clean_html},
    )
    stems = {path.stem for path in paths}
    notebooks_read = [nbformat.read(path, as_version=4) for path in paths]
    titles = [(f"{path.stem}.html", title_and_header(notebook, path.stem)[0])
              for path, notebook in zip(paths, notebooks_read, strict=True)]
    items, written, entries = [], [], []
    for number, (path, notebook) in enumerate(zip(paths, notebooks_read, strict=True)):
        math = uses_math(notebook)
        if math:
            print(f"warning: {path.name} uses TeX math: its page loads MathJax from a CDN", file=sys.stderr)
        body, _ = exporter.from_notebook_node(
            notebook,
            resources={
                "metadata": {"name": path.stem},
                "reading_copy_mermaid_script": script,
                "reading_copy_math": math,
            },
        )
        page = out / f"{path.stem}.html"
        body = _link_prerequisites(_link_next(_link_lessons(_escape_mermaid_sources(body), stems), stems), stems)
        previous = titles[number - 1] if number > 0 else None
        following = titles[number + 1] if number + 1 < len(titles) else None
        write_new(page, add_navigation(body, previous, following))
        written.append(page)
        title, header = title_and_header(notebook, path.stem)
        entries += search_entries(page.name, title, body)
        diagrams_here = sum(source.count("```mermaid") for source in _markdown_sources(notebook))
        print(f"{page.relative_to(ROOT) if ROOT in page.parents else page}: {title} "
              f"({diagrams_here} diagram{'s' * (diagrams_here != 1)})")
        items.append(
            f'<li><a class="lesson" href="{html.escape(page.name)}">{html.escape(title)}</a>'
            f'<br><span class="header">{_link_prerequisites(clean_html(_inline_markdown(header)), stems) if header else ""}'
            '</span></li>'
        )

    write_new(
        out / "index.html",
        INDEX.format(
            title="Durable agent workflows: the lessons",
            items="\n".join(items),
            footer=html.escape(f"Built from notebooks/ by scripts/build_html.py; {diagrams}."),
        ),
    )
    # json.dumps escapes no "</": harmless in a .js file, which no HTML parser reads.
    write_new(out / "search-index.js", "window.READING_COPY_SEARCH = " + json.dumps(entries, ensure_ascii=True) + ";\n")
    write_new(out / "search.js", SEARCH_JS)
    write_new(
        out / "build-info.json",
        json.dumps({"mermaid": MERMAID_VERSION if script else None, "offline_diagrams": bool(script),
                    "lessons": [page.name for page in written]}, indent=2) + "\n",
    )
    print(f"{len(written)} lessons and index.html in {out}; {diagrams}")
    return written


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "html",
                        help="output folder: new, empty, or built by this script before (default: build/html)")
    parser.add_argument("--notebooks", type=Path, default=NOTEBOOKS, help="the lessons' folder (default: notebooks)")
    args = parser.parse_args(argv)
    try:
        build(args.out.absolute(), args.notebooks)
    except Refused as refused:
        print(f"build_html.py: {refused}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
