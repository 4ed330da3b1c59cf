"""The reading copy (scripts/build_html.py): a notebook's own HTML is cleaned, and the output folder is its own.

The pages are opened from the file system, so a script a notebook carries would run there: every
test here builds pages with the real script in a child process and reads them with an HTML
parser, as a browser would, rather than searching the text.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build_html.py"
LESSONS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))

#: A 1x1 PNG: an image output that must still show.
PIXEL = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082")).decode()

HOSTILE_MARKDOWN = """\
# 01 · Hostile
Reading 1 min · Exercises 0 min <img src="x" onerror="alert('index')">

<script>alert('markdown script')</script>
<a href="javascript:alert('link')">an HTML javascript: link</a>,
<a href=" JaVaScRiPt:alert('case')">mixed case</a>, <a href="&#106;avascript:alert('entity')">an entity</a>,
[a Markdown javascript: link](javascript:alert('markdown-link')).
<img src="x" onerror="alert('onerror')"> <iframe src="https://example.com"></iframe>
<svg onload="alert('svg')"></svg> <div onclick="alert('click')">a div that keeps its text</div>
<details><summary>more</summary><b>kept</b></details>

![a figure](figure.png) and [the next lesson](02_clean.ipynb#top), [a site](https://example.com/).

| a | b |
|---|---|
| 1 | 2 |
"""

HOSTILE_HTML_OUTPUT = """\
<script>alert('output script')</script>
<style>@import url(https://example.com/x.css);
td { color: red; background-image: url(https://example.com/p.png); cursor: url(https://example.com/c.cur) }
.dataframe > th { text-align: right; background-color: rgb(1, 2, 3) }
a[title="</style><script>alert('sheet')</script>"] { color: blue }</style>
<table class="dataframe" border="1"><thead><tr style="text-align: right;"><th>x</th></tr></thead>
<tbody><tr><td id="cell" onmouseover="alert('td')">1</td></tr></tbody></table>
<a href="javascript:alert('output link')">output link</a>
"""


def hostile_notebook() -> nbformat.NotebookNode:
    output = new_output("display_data", data={"text/html": HOSTILE_HTML_OUTPUT, "text/plain": "a frame"})
    javascript = new_output("display_data", data={"application/javascript": "alert('javascript output')",
                                                  "text/plain": "<javascript>"})
    markdown = new_output("display_data", data={"text/markdown": "<script>alert('markdown output')</script>**bold**",
                                                "text/plain": "md"})
    image = new_output("display_data", data={"image/png": PIXEL, "text/plain": "<Figure>"})
    code = new_code_cell("show()", execution_count=1, outputs=[output, javascript, markdown, image])
    notebook = new_notebook(cells=[new_markdown_cell(HOSTILE_MARKDOWN), code])
    notebook.metadata["title"] = "</title><script>alert('title')</script>"
    return notebook


def clean_notebook() -> nbformat.NotebookNode:
    return new_notebook(cells=[new_markdown_cell("# 02 · Clean\nReading 1 min · Exercises 0 min\n\nNothing else.")])


class Page(HTMLParser):
    """What a browser would make of a page: its elements, attributes, and scripts."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[tuple[tuple[str, str | None], ...], str]] = []
        self.styles: list[str] = []
        self._open: str | None = None
        self._data: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self._open, self._data = tag, []
            self._attrs = tuple(attrs)

    def handle_data(self, data):
        if self._open:
            self._data.append(data)

    def handle_endtag(self, tag):
        if tag == self._open == "script":
            self.scripts.append((self._attrs, "".join(self._data)))
        elif tag == self._open == "style":
            self.styles.append("".join(self._data))
        if tag == self._open:
            self._open = None

    def named(self, tag: str) -> list[dict[str, str | None]]:
        return [attrs for name, attrs in self.elements if name == tag]

    def addresses(self) -> list[str]:
        return [value or "" for _, attrs in self.elements for name, value in attrs.items() if name in ("href", "src", "action")]


def build(out: Path, *notebooks: Path | str) -> subprocess.CompletedProcess:
    """The script, with npm out of sight: mermaid comes from build/cache/ if an earlier build put it
    there, else from its CDN address; no test here waits on the npm registry, or needs a network."""
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    return subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), *map(str, notebooks)],
                          capture_output=True, text=True, timeout=600, env=env)


def scheme(address: str) -> str:
    """The scheme a browser would read: it skips leading spaces and control characters, and ignores case."""
    found = re.match(r"[\x00-\x20]*([a-zA-Z][a-zA-Z0-9+.\-\t\n\r]*):", address)
    return re.sub(r"[\t\n\r]", "", found[1]).lower() if found else ""


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    folder = tmp_path_factory.mktemp("reading")
    notebooks = folder / "notebooks"
    notebooks.mkdir()
    nbformat.write(hostile_notebook(), notebooks / "01_hostile.ipynb")
    nbformat.write(clean_notebook(), notebooks / "02_clean.ipynb")
    return folder / "html", build(folder / "html", "--notebooks", notebooks)


def test_scripts_handlers_and_javascript_links_in_a_notebook_never_reach_the_reading_copy(hostile):
    out, done = hostile
    assert done.returncode == 0, done.stderr
    page = Page((out / "01_hostile.html").read_text(encoding="utf-8"))
    control = Page((out / "02_clean.html").read_text(encoding="utf-8"))
    assert page.scripts == control.scripts, "a page runs only the scripts the template adds to every page"
    assert [name for _, attrs in page.elements for name in attrs if name.startswith("on")] == []
    assert {scheme(address) for address in page.addresses()} <= {"", "http", "https", "data"}
    assert [a for a in page.addresses() if scheme(a) == "data" and not a.startswith("data:image/png;base64,")] == []
    assert not {"iframe", "svg", "object", "embed", "form"} & {name for name, _ in page.elements}
    body_styles = page.styles[len(control.styles):]
    assert body_styles and not any(word in sheet for sheet in body_styles for word in ("@import", "url(", "</"))
    index = Page((out / "index.html").read_text(encoding="utf-8"))
    # The index runs only the search: two files the script writes, no inline code, no handler.
    assert index.scripts == [((("src", "search-index.js"),), ""), ((("src", "search.js"),), "")]
    assert [name for _, attrs in index.elements for name in attrs if name.startswith("on")] == []
    search = (out / "search.js").read_text()
    assert "innerHTML" not in search and "eval(" not in search and "fetch(" not in search
    assert "alert(" not in (out / "search-index.js").read_text().split("=", 1)[0]


def test_what_a_lesson_needs_still_renders_after_cleaning(hostile):
    out, _ = hostile
    page = Page((out / "01_hostile.html").read_text(encoding="utf-8"))
    hrefs = [attrs.get("href") for attrs in page.named("a")]
    assert "02_clean.html#top" in hrefs and "https://example.com/" in hrefs  # links between lessons, and out
    assert f"data:image/png;base64,{PIXEL}" in [attrs.get("src") for attrs in page.named("img")]
    assert "figure.png" in [attrs.get("src") for attrs in page.named("img")]
    assert len(page.named("table")) == 2 and "cell" in [td.get("id") for td in page.named("td")]  # the frame, the Markdown table
    assert page.named("details") and page.named("summary") and page.named("b")
    sheet = next(sheet for sheet in page.styles if ".dataframe" in sheet)
    assert ".dataframe > th { text-align: right; background-color: rgb(1, 2, 3) }" in sheet
    assert "td { color: red }" in sheet


@pytest.fixture(scope="module")
def lessons_built(tmp_path_factory) -> Path:
    """The reading copy of the committed lessons, built once for the tests that read it."""
    out = tmp_path_factory.mktemp("lessons") / "html"
    done = build(out)
    assert done.returncode == 0, done.stderr
    return out


def test_the_lessons_pages_keep_their_tables_styles_and_diagrams(lessons_built):
    tmp_path = lessons_built.parent
    for lesson in LESSONS:
        notebook = nbformat.read(lesson, as_version=4)
        outputs = [output.get("data", {}) for cell in notebook.cells for output in cell.get("outputs", [])]
        tables = sum(data.get("text/html", "").count("<table") for data in outputs)
        diagrams = sum(cell.source.count("```mermaid") for cell in notebook.cells if cell.cell_type == "markdown")
        page = Page((tmp_path / "html" / f"{lesson.stem}.html").read_text(encoding="utf-8"))
        assert len(page.named("table")) >= tables, lesson.name
        assert len([a for a in page.named("pre") if a.get("class") == "mermaid"]) == diagrams, lesson.name
        assert [a for a in page.named("h1")], lesson.name
    explorer = Page((tmp_path / "html" / "12_crash_explorer.html").read_text(encoding="utf-8"))
    # The heat map is a matplotlib figure now (a PNG beside its compared table): it must reach the page.
    assert any((img.get("src") or "").startswith("data:image/png;base64,") for img in explorer.named("img")), \
        "the heat map's figure is not on the page"


# --------------------------------------------------------------------------- navigation and search


def _relative_links(page: Page) -> list[str]:
    return [a.get("href") or "" for a in page.named("a") if not scheme(a.get("href") or "") and a.get("href")]


def test_every_link_between_pages_resolves_to_a_page_and_an_anchor_on_it(lessons_built):
    out = lessons_built
    pages = {path.name: Page(path.read_text(encoding="utf-8")) for path in out.glob("*.html")}
    assert set(pages) == {"index.html", *(f"{lesson.stem}.html" for lesson in LESSONS)}
    broken = []
    for name, page in pages.items():
        for href in _relative_links(page):
            target, _, anchor = href.partition("#")
            target = target or name
            if target not in pages:
                broken.append(f"{name}: {href} (no such page)")
            elif anchor and anchor not in {attrs.get("id") for _, attrs in pages[target].elements}:
                broken.append(f"{name}: {href} (no such anchor)")
    assert broken == []
    assert not any(".ipynb" in href for page in pages.values() for href in _relative_links(page))


def _nav(page: Page, rel: str) -> list[str]:
    return [a.get("href") or "" for a in page.named("a") if a.get("rel") == rel]


def test_previous_and_next_chain_every_lesson_in_order_and_every_page_links_the_index(lessons_built):
    out = lessons_built
    expected = [f"{lesson.stem}.html" for lesson in LESSONS]
    forward, current = [], expected[0]
    while current and len(forward) <= len(expected):
        forward.append(current)
        following = _nav(Page((out / current).read_text(encoding="utf-8")), "next")
        assert len(set(following)) <= 1 and len(following) in (0, 2), (current, following)  # top and bottom bars
        current = following[0] if following else ""
    assert forward == expected, "next links do not visit every lesson in order"
    backward, current = [], expected[-1]
    while current and len(backward) <= len(expected):
        backward.append(current)
        previous = _nav(Page((out / current).read_text(encoding="utf-8")), "prev")
        current = previous[0] if previous else ""
    assert backward == expected[::-1], "previous links do not go back through every lesson"
    for name in expected:
        page = Page((out / name).read_text(encoding="utf-8"))
        assert [a.get("href") for a in page.named("a") if a.get("class") == "index"] == ["index.html"] * 2, name
    index = Page((out / "index.html").read_text(encoding="utf-8"))
    listed = [a.get("href") for a in index.named("a") if a.get("class") == "lesson"]
    assert listed == expected, "the index does not link every lesson in order"


def test_each_next_line_links_the_next_lesson(lessons_built):
    for lesson, following in zip(LESSONS, LESSONS[1:], strict=False):
        text = (lessons_built / f"{lesson.stem}.html").read_text(encoding="utf-8")
        found = re.search(r"Next:(?:</strong>)?\s*<a href=\"([^\"]+)\"", text)
        assert found and found[1] == f"{following.stem}.html", f"{lesson.name}: its 'Next:' is not a link to {following.stem}"


def test_a_next_line_written_as_text_or_as_a_markdown_link_becomes_one_link(tmp_path):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    for stem, last in (("01_a", "**Next:** 02_b, in plain text."), ("02_b", "**Next:** [03_c](03_c.ipynb), a link."),
                       ("03_c", "**Next:** 99_not_a_lesson stays text.")):
        prerequisites = " · Prerequisites: 01_a, 02_b, 99_not_a_lesson" if stem == "03_c" else ""
        cells = [new_markdown_cell(f"# {stem}\nReading 1 min · Exercises 0 min{prerequisites}"), new_markdown_cell(last)]
        nbformat.write(new_notebook(cells=cells), notebooks / f"{stem}.ipynb")
    done = build(tmp_path / "html", "--notebooks", notebooks)
    assert done.returncode == 0, done.stderr
    for stem, target in (("01_a", "02_b"), ("02_b", "03_c")):
        page = Page((tmp_path / "html" / f"{stem}.html").read_text(encoding="utf-8"))
        body_links = [a.get("href") for a in page.named("a") if not a.get("rel") and a.get("class") != "index"
                      and a.get("class") != "anchor-link"]
        assert body_links == [f"{target}.html"], (stem, body_links)
    assert "99_not_a_lesson stays text" in (tmp_path / "html" / "03_c.html").read_text(encoding="utf-8")
    # The header's prerequisites link their pages, on the lesson's page and in the index.
    for name in ("03_c.html", "index.html"):
        page = Page((tmp_path / "html" / name).read_text(encoding="utf-8"))
        hrefs = [a.get("href") for a in page.named("a")]
        assert "01_a.html" in hrefs and "02_b.html" in hrefs and "99_not_a_lesson.html" not in hrefs, (name, hrefs)


def test_the_search_index_holds_every_lesson_s_sections_with_anchors_that_exist(lessons_built):
    out = lessons_built
    text = (out / "search-index.js").read_text(encoding="utf-8")
    prefix = "window.READING_COPY_SEARCH = "
    assert text.startswith(prefix) and text.rstrip().endswith(";")
    entries = json.loads(text[len(prefix):].rstrip().rstrip(";"))
    assert {entry["page"] for entry in entries} == {f"{lesson.stem}.html" for lesson in LESSONS}
    ids = {name: {attrs.get("id") for _, attrs in Page((out / name).read_text(encoding="utf-8")).elements}
           for name in {entry["page"] for entry in entries}}
    assert all(entry["anchor"] in ids[entry["page"]] for entry in entries)
    assert all(entry["heading"] and entry["title"] for entry in entries)
    lease = [entry for entry in entries if "fencing" in (entry["heading"] + entry["text"]).lower()]
    assert any(entry["page"].startswith("10_") for entry in lease)
    assert len(text) < 2_000_000, "the search index grew past 2 MB"


# --------------------------------------------------------------------------- the output folder


def test_a_folder_it_did_not_build_is_refused_and_left_as_it_was(tmp_path):
    out = tmp_path / "html"
    out.mkdir()
    (out / "notes.txt").write_text("the user's own notes")
    done = build(out)
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.splitlines()
    assert str(out) in line and "did not write" in line
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert (out / "notes.txt").read_text() == "the user's own notes"


def test_a_link_as_the_folder_is_refused(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (tmp_path / "link").symlink_to(mine)
    done = build(tmp_path / "link")
    assert done.returncode == 2 and "symlink" in done.stderr and len(done.stderr.splitlines()) == 1
    assert list(mine.iterdir()) == []


def test_a_rebuild_removes_only_what_the_last_build_wrote(hostile, tmp_path):
    built, _ = hostile
    notebooks = built.parent / "notebooks"
    out = tmp_path / "html"
    assert build(out, "--notebooks", notebooks).returncode == 0
    (out / "mine.txt").write_text("added by the user")
    outside = tmp_path / "outside.txt"
    outside.write_text("not the build's")
    (out / "01_hostile.html").unlink()
    (out / "01_hostile.html").symlink_to(outside)   # a link where a page was: removed as a link
    written = json.loads((out / ".reading-copy.json").read_text())["files"]
    done = build(out, "--notebooks", notebooks)
    assert done.returncode == 0, done.stderr
    assert (out / "mine.txt").read_text() == "added by the user"
    assert outside.read_text() == "not the build's"
    assert not (out / "01_hostile.html").is_symlink()
    assert json.loads((out / ".reading-copy.json").read_text())["files"] == written

    (out / ".reading-copy.json").write_text(json.dumps({"files": ["../outside.txt"]}))
    done = build(out, "--notebooks", notebooks)
    assert done.returncode == 2 and "not one this script wrote" in done.stderr and outside.exists()


def test_a_name_the_build_would_take_from_the_user_is_refused(hostile, tmp_path):
    built, _ = hostile
    notebooks = built.parent / "notebooks"
    out = tmp_path / "html"
    assert build(out, "--notebooks", notebooks).returncode == 0
    more = tmp_path / "more"
    shutil.copytree(notebooks, more)
    nbformat.write(clean_notebook(), more / "03_new.ipynb")
    (out / "03_new.html").write_text("the user's page")
    done = build(out, "--notebooks", more)
    assert done.returncode == 2 and "03_new.html is not from the last build" in done.stderr
    assert (out / "03_new.html").read_text() == "the user's page"
