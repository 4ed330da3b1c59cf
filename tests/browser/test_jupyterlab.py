"""Every lesson, run in JupyterLab in a real browser as a learner runs it; then the reading copy, offline.

For each notebook in notebooks/ (found when the test is collected, so a new lesson is covered without
editing this file) the test opens it in JupyterLab in headless Chromium, clears the outputs and runs
every cell from the Run menu, waits until every code cell has its execution count and the kernel is
idle, and checks what a learner would see:

- the execution counts are 1, 2, 3, ... in order: every cell ran, once, top to bottom;
- a cell shows an error (a red traceback, or anything on stderr) only if it is tagged
  ``raises-exception`` in the .ipynb, and each tagged cell shows its error, with the same exception
  name as the committed notebook (cells are matched by index; the names are read from the notebook
  JupyterLab saves);
- every ```mermaid block of its Markdown is drawn as an SVG picture, none as mermaid's error box.

A screenshot of each whole notebook goes to build/screenshots/<notebook>.png, and one of each
diagram beside it. The last test builds the reading copy with its one command
(scripts/build_html.py), opens its index.html from the file system with every request beyond this
machine refused, searches from its search box, then follows the first lesson's link and each
page's "next" link through every lesson in order, checking each page's navigation (previous, index,
next, and its "Next:" line as a link) and that its diagrams are drawn there too.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from browserlab import NOTEBOOKS, RESULTS, ROOT, SCREENSHOTS, JupyterLab, unavailable

try:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
except ImportError:  # without Playwright the browser fixture skips (or, in CI, fails) with the reason
    PlaywrightTimeout = TimeoutError  # type: ignore[misc, assignment]

LESSONS = sorted(NOTEBOOKS.glob("[0-9]*.ipynb"))
RUN_TIMEOUT_S = 300
MERMAID_FENCE = re.compile(r"^\s*```mermaid\s*$", re.M)
MERMAID_BLOCK = re.compile(r"^\s*```mermaid\s*\n(.*?)^\s*```\s*$", re.M | re.S)
STDERR = "application/vnd.jupyter.stderr"  # JupyterLab draws tracebacks and stderr text with this type


def _notebook(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def mermaid_blocks(notebook: dict) -> list[int]:
    """The number of ```mermaid blocks in each Markdown cell, by cell index (0 for other cells)."""
    return [len(MERMAID_FENCE.findall(_source(c))) if c["cell_type"] == "markdown" else 0 for c in notebook["cells"]]


def mermaid_sources(notebook: dict) -> list[str]:
    """The text of every ```mermaid block, in order."""
    return [block.strip() for c in notebook["cells"] if c["cell_type"] == "markdown"
            for block in MERMAID_BLOCK.findall(_source(c))]


def raising_cells(notebook: dict) -> set[int]:
    return {i for i, c in enumerate(notebook["cells"]) if "raises-exception" in c.get("metadata", {}).get("tags", [])}


def error_names(notebook: dict) -> dict[int, list[str]]:
    return {
        i: [o["ename"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
        for i, c in enumerate(notebook["cells"])
        if c["cell_type"] == "code"
    }


# --------------------------------------------------------------------------- what the page shows

CELLS_JS = """
([stderr]) => [...document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell')].map(cell => ({
  type: cell.classList.contains('jp-CodeCell') ? 'code' : cell.classList.contains('jp-MarkdownCell') ? 'markdown' : 'raw',
  prompt: (cell.querySelector('.jp-InputArea-prompt') || {textContent: ''}).textContent.trim(),
  errors: [...cell.querySelectorAll(`.jp-OutputArea-output[data-mime-type="${stderr}"]`)]
            .map(e => e.innerText.trim().slice(-300)),
  diagrams: [...cell.querySelectorAll('.jp-RenderedMermaid')].map(d => ({
    warning: d.classList.contains('jp-mod-warning'),
    text: d.classList.contains('jp-mod-warning') ? d.innerText.slice(0, 300) : '',
    svg: !!d.querySelector('svg') ||
         [...d.querySelectorAll('img')].some(i => i.src.startsWith('data:image/svg+xml') && i.complete && i.naturalWidth > 0),
  })),
}))
"""

RUN_STATE_JS = """
() => ({
  kernel: (document.querySelector('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator') || {dataset: {}}).dataset.status,
  prompts: [...document.querySelectorAll('.jp-NotebookPanel .jp-CodeCell .jp-InputArea-prompt')].map(p => p.textContent.trim()),
})
"""


RUN_ALL_ATTEMPTS = 3
RUN_START_TIMEOUT_MS = 20_000


def _run_all(page) -> None:
    """Run > Run All Cells, until the page shows that it started: some prompt no longer ``[ ]:``.

    JupyterLab marks every queued cell ``[*]`` at once. Under load a click can land while the menu
    is still opening (seen once on the first lesson: 300 s of an idle kernel and empty prompts);
    with every prompt still empty, nothing ran, and Run All is chosen again.
    """
    for attempt in range(1, RUN_ALL_ATTEMPTS + 1):
        if attempt > 1:
            page.keyboard.press("Escape")  # a menu left open by the missed click would swallow the next one
        _menu(page, "Run", "runmenu:run-all")
        try:
            page.wait_for_function(
                "() => [...document.querySelectorAll('.jp-NotebookPanel .jp-CodeCell .jp-InputArea-prompt')]"
                ".some(p => p.textContent.trim() !== '[ ]:')", timeout=RUN_START_TIMEOUT_MS)
            return
        except PlaywrightTimeout:
            if attempt == RUN_ALL_ATTEMPTS:
                raise AssertionError(f"Run All chosen {RUN_ALL_ATTEMPTS} times and no cell started") from None


def _wait_until_run_ends(page, timeout_s: float) -> list[str]:
    """Wait until the kernel is idle with no cell queued or running ([*]), steadily for a second.

    That is the end of Run All whether every cell ran or a cell's error stopped it (JupyterLab then
    clears the queue); the prompts tell which. Returns the code cells' prompts.
    """
    deadline, steady = time.monotonic() + timeout_s, 0
    while True:
        state = page.evaluate(RUN_STATE_JS)
        ran = any(re.fullmatch(r"\[\d+\]:", p) for p in state["prompts"])
        if state["kernel"] == "idle" and ran and "[*]:" not in state["prompts"]:
            steady += 1
            if steady >= 4:
                return state["prompts"]
        else:
            steady = 0
        if time.monotonic() > deadline:
            raise TimeoutError(f"still running after {timeout_s:.0f} s: kernel {state['kernel']}, prompts {state['prompts']}")
        page.wait_for_timeout(250)


ALL_CLEARED_JS = """
() => [...document.querySelectorAll('.jp-NotebookPanel .jp-CodeCell')].every(cell =>
  cell.querySelector('.jp-InputArea-prompt').textContent.trim() === '[ ]:' &&
  cell.querySelectorAll('.jp-OutputArea-output').length === 0)
"""

DIAGRAMS_SETTLED_JS = """
(expected) => {
  const done = [...document.querySelectorAll('.jp-RenderedMermaid')];
  return done.length >= expected && done.every(d => d.classList.contains('jp-mod-warning') ||
    !!d.querySelector('svg') || [...d.querySelectorAll('img')].some(i => i.complete && i.naturalWidth > 0));
}
"""


# The notebook's tab, found by its label, carries no "unsaved changes" mark (and has a label at all).
SAVED_JS = """
(name) => {
  const tabs = [...document.querySelectorAll('.lm-DockPanel-tabBar .lm-TabBar-tab')]
    .filter(t => (t.querySelector('.lm-TabBar-tabLabel') || {}).textContent === name);
  return tabs.length === 1 && !tabs[0].classList.contains('jp-mod-dirty');
}
"""
SAVE_ATTEMPTS = 3
SAVE_TIMEOUT_MS = 60_000


MENU_ATTEMPTS = 3
#: What each JupyterLab dialog closed by :func:`_menu` said, printed with the lesson's line.
DIALOGS_CLOSED: list[str] = []


def _menu(page, menu: str, command: str) -> None:
    """Open a menu of JupyterLab's menu bar and click the item that runs the given command.

    A JupyterLab dialog open over the page takes every click (seen once, under a load of 11, on
    09's Run All: the click waited 60 s behind it). Its text is kept for the summary, Escape closes
    it, and the click is tried again; whatever it was about, the checks of every cell's output
    that follow still judge the lesson.
    """
    item = page.locator(".lm-MenuBar-item", has_text=re.compile(rf"^{menu}$"))
    for attempt in range(1, MENU_ATTEMPTS + 1):
        try:
            item.click(timeout=20_000)
            break
        except PlaywrightTimeout:
            dialog = page.locator(".jp-Dialog")
            if attempt == MENU_ATTEMPTS or not dialog.count():
                raise
            DIALOGS_CLOSED.append(" ".join(dialog.first.inner_text().split())[:200])
            page.keyboard.press("Escape")
    page.locator(f'.lm-Menu-item[data-command="{command}"]').first.click()


def _whole_notebook_screenshot(page, path: Path) -> None:
    """Make the window as tall as the notebook, so that one screenshot shows every cell."""
    height = page.evaluate(
        """() => { const s = document.querySelector('.jp-NotebookPanel .jp-WindowedPanel-outer') ||
                           document.querySelector('.jp-NotebookPanel-notebook');
                   return Math.ceil(s.getBoundingClientRect().top + s.scrollHeight + 40); }"""
    )
    page.set_viewport_size({"width": 1280, "height": max(900, min(height, 60_000))})
    page.evaluate("""() => { const s = document.querySelector('.jp-NotebookPanel .jp-WindowedPanel-outer') ||
                                     document.querySelector('.jp-NotebookPanel-notebook');
                             s.scrollTop = 0; }""")
    # Two animation frames: the page has laid itself out at the new size and painted it.
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
    page.screenshot(path=str(path))


@pytest.mark.parametrize("lesson", LESSONS, ids=[p.stem for p in LESSONS])
def test_notebook_runs_in_jupyterlab(lesson: Path, jupyterlab: JupyterLab, offline_context) -> None:
    context, guard = offline_context
    committed = _notebook(lesson)
    cells = committed["cells"]
    code_cells = sum(c["cell_type"] == "code" for c in cells)
    tagged = raising_cells(committed)
    expected_diagrams = mermaid_blocks(committed)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for stale in SCREENSHOTS.glob(f"{lesson.stem}.*png"):
        stale.unlink()
    started = time.perf_counter()

    page = context.new_page()
    page_errors: list[str] = []
    page.on("pageerror", lambda error: page_errors.append(str(error)))
    page.goto(f"{jupyterlab.url}/lab/tree/{lesson.name}?reset&token={jupyterlab.token}")
    page.wait_for_function("(n) => document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell').length === n",
                           arg=len(cells), timeout=120_000)
    page.wait_for_selector('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator[data-status="idle"]', timeout=120_000)

    _menu(page, "Edit", "editmenu:clear-all")
    page.wait_for_function(ALL_CLEARED_JS, timeout=30_000)
    run_started = time.perf_counter()
    _run_all(page)
    try:
        _wait_until_run_ends(page, RUN_TIMEOUT_S)
    except TimeoutError as error:
        page.screenshot(path=str(SCREENSHOTS / f"{lesson.stem}.timeout.png"))
        raise AssertionError(f"{lesson.name}: {error} (screenshot {lesson.stem}.timeout.png)\n{jupyterlab.log_tail()}") from None
    ran_in = time.perf_counter() - run_started
    if any(expected_diagrams):
        page.wait_for_function(DIAGRAMS_SETTLED_JS, arg=sum(expected_diagrams), timeout=60_000)

    shown = page.evaluate(CELLS_JS, [STDERR])
    problems: list[str] = []
    if len(shown) != len(cells):
        problems.append(f"the page shows {len(shown)} cells, the notebook has {len(cells)}")
    counts = [c["prompt"] for c in shown if c["type"] == "code"]
    if counts != [f"[{n}]:" for n in range(1, code_cells + 1)]:
        problems.append(f"execution counts are not 1..{code_cells} in order (Run All stopped?): {counts}")
    for index, (cell, seen) in enumerate(zip(cells, shown, strict=False)):
        if seen["type"] != cell["cell_type"]:
            problems.append(f"cell {index}: the page shows a {seen['type']} cell, the notebook a {cell['cell_type']} cell")
            continue
        if seen["errors"] and index not in tagged:
            problems.append(f"cell {index} shows an error and is not tagged raises-exception: {seen['errors'][-1]!r}")
        if index in tagged and not seen["errors"]:
            problems.append(f"cell {index} is tagged raises-exception but shows no error")
        diagrams = seen["diagrams"]
        if len(diagrams) != expected_diagrams[index]:
            problems.append(f"cell {index}: {expected_diagrams[index]} mermaid blocks, {len(diagrams)} diagrams on the page")
        for number, diagram in enumerate(diagrams, 1):
            if diagram["warning"] or not diagram["svg"]:
                problems.append(f"cell {index}: diagram {number} is not drawn as an SVG picture: {diagram['text']!r}")

    # Save from the File menu and read what JupyterLab wrote: which outputs are errors, and their names.
    # Wait for what the page shows, not for a time: the notebook's tab loses its "unsaved changes" mark
    # (jp-mod-dirty) once the server has written the file. Under load a click can land while the menu
    # is still opening; then the tab stays marked, and Save is chosen again.
    saved_path = jupyterlab.root / lesson.name
    shown_counts = [int(p[1:-2]) if re.fullmatch(r"\[\d+\]:", p) else None for p in counts]
    if page.evaluate(SAVED_JS, lesson.name):  # else a finished save could not be told from none
        problems.append(f"after Run All the tab of {lesson.name} shows no unsaved changes (jp-mod-dirty)")
    for attempt in range(1, SAVE_ATTEMPTS + 1):
        _menu(page, "File", "docmanager:save")
        try:
            page.wait_for_function(SAVED_JS, arg=lesson.name, timeout=SAVE_TIMEOUT_MS)
            break
        except PlaywrightTimeout:
            if attempt == SAVE_ATTEMPTS:
                problems.append(f"after {SAVE_ATTEMPTS} saves the tab of {lesson.name} still shows unsaved changes")
    saved = _notebook(saved_path)
    if [c.get("execution_count") for c in saved["cells"] if c["cell_type"] == "code"] != shown_counts:
        problems.append("the notebook JupyterLab saved does not hold the execution counts the page shows")
    names_now, names_committed = error_names(saved), error_names(committed)
    for index in sorted(set(names_now) | set(names_committed)):
        if index not in tagged and names_now.get(index):
            problems.append(f"cell {index} raised {names_now[index]} in JupyterLab (not tagged raises-exception)")
        if index in tagged and names_now.get(index) != names_committed.get(index):
            problems.append(f"cell {index} raised {names_now.get(index)} in JupyterLab; the committed notebook shows "
                            f"{names_committed.get(index)}")

    # The left sidebar (file browser) closed, the whole notebook in one screenshot, and each diagram alone.
    _menu(page, "View", "filebrowser:toggle-main")
    screenshot = SCREENSHOTS / f"{lesson.stem}.png"
    _whole_notebook_screenshot(page, screenshot)
    drawn = page.locator(".jp-NotebookPanel .jp-RenderedMermaid")
    for number in range(drawn.count()):
        drawn.nth(number).screenshot(path=str(SCREENSHOTS / f"{lesson.stem}.diagram-{number + 1}.png"))

    for session in jupyterlab.api("GET", "/api/sessions") or []:  # type: ignore[union-attr]
        jupyterlab.api("DELETE", f"/api/sessions/{session['id']}")
    page.close()

    elapsed = time.perf_counter() - started
    errors_shown = sum(bool(c["errors"]) for c in shown)
    diagrams_drawn = sum(d["svg"] and not d["warning"] for c in shown for d in c["diagrams"])
    RESULTS.append(
        f"{lesson.stem}: {code_cells} code cells ran in {ran_in:.1f} s ({elapsed:.1f} s with the page); "
        f"errors shown in {errors_shown} cells ({len(tagged)} tagged raises-exception); diagrams {diagrams_drawn}/{sum(expected_diagrams)} "
        f"drawn as SVG; {'FAILED' if problems else 'ok'}"
        + (f"; dialogs closed before a menu click: {DIALOGS_CLOSED}" if DIALOGS_CLOSED else "")
    )
    DIALOGS_CLOSED.clear()
    if guard.refused:  # a lesson must work in a room without Wi-Fi
        problems.append(f"the page asked for something beyond this machine: {sorted(set(guard.refused))}")
    if page_errors:
        problems.append(f"JavaScript errors on the page: {page_errors}")
    assert not problems, f"{lesson.name} in JupyterLab:\n  " + "\n  ".join(problems)


# --------------------------------------------------------------------------- the reading copy, offline

READING_JS = """
() => ({
  blocks: document.querySelectorAll('.jp-Mermaid').length,
  sources: [...document.querySelectorAll('.jp-Mermaid > pre.mermaid')].map(p => p.textContent.trim()),
  warnings: [...document.querySelectorAll('.jp-RenderedMermaid.jp-mod-warning')].map(d => d.innerText.slice(0, 300)),
  drawn: [...document.querySelectorAll('.jp-RenderedMermaid:not(.jp-mod-warning)')].filter(d =>
           [...d.querySelectorAll('img')].some(i => i.src.startsWith('data:image/svg+xml') && i.complete && i.naturalWidth > 0)).length,
})
"""


NAV_JS = """
() => ({
  index: [...document.querySelectorAll('nav.reading-nav a.index')].map(a => a.getAttribute('href')),
  prev: [...document.querySelectorAll('nav.reading-nav a[rel=prev]')].map(a => a.getAttribute('href')),
  next: [...document.querySelectorAll('nav.reading-nav a[rel=next]')].map(a => a.getAttribute('href')),
  nextLine: (() => { const s = [...document.querySelectorAll('strong')].find(e => e.textContent.trim() === 'Next:');
                     const a = s && s.nextElementSibling; return a && a.tagName === 'A' ? a.getAttribute('href') : null; })(),
})
"""


def test_reading_copy_offline(offline_context) -> None:
    context, guard = offline_context
    started = time.perf_counter()
    out = ROOT / "build" / "html"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_html.py"), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    info = json.loads((out / "build-info.json").read_text())
    if not info["offline_diagrams"]:
        unavailable("the reading copy was built without npm, so its diagrams need the network:\n" + done.stderr)

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for stale in SCREENSHOTS.glob("reading-copy.*png"):
        stale.unlink()
    page = context.new_page()
    page_errors: list[str] = []
    page.on("pageerror", lambda error: page_errors.append(str(error)))
    page.goto((out / "index.html").as_uri())
    links = page.locator("ol.lessons li a.lesson")
    listed = [links.nth(i).get_attribute("href") for i in range(links.count())]
    assert listed == [f"{p.stem}.html" for p in LESSONS], "index.html does not list every lesson, in order"
    headers = page.locator("ol.lessons li .header").all_inner_texts()
    assert all(h.startswith("Reading ") and " min" in h for h in headers), headers
    page.screenshot(path=str(SCREENSHOTS / "reading-copy.index.png"), full_page=True)

    problems: list[str] = []
    # The search box: a word typed lists sections; the first result opens its lesson at that heading.
    page.locator("#search").fill("fencing token")
    page.wait_for_function("() => document.querySelectorAll('#search-results li a').length > 0", timeout=10_000)
    hits = page.locator("#search-results li a")
    first_hit = hits.first.get_attribute("href") or ""
    if not re.fullmatch(r"\d\d_\w+\.html#.+", first_hit):
        problems.append(f"search: the first result for 'fencing token' is {first_hit!r}, not a lesson's section")
    page.screenshot(path=str(SCREENSHOTS / "reading-copy.search.png"))
    hits.first.click()
    page.wait_for_url(f"**/{first_hit.split('#')[0]}*")
    anchor = first_hit.split("#", 1)[1]
    if not page.evaluate("(a) => { const e = document.getElementById(decodeURIComponent(a)) || "
                         "document.getElementById(a); return !!e && e.getBoundingClientRect().top < innerHeight; }", anchor):
        problems.append(f"search: {first_hit} did not open at its heading")

    # From the index, the first lesson; then "next" (the bar at the top) through every lesson, in order.
    page.goto((out / "index.html").as_uri())
    page.locator("ol.lessons li a.lesson").first.click()
    for number, lesson in enumerate(LESSONS):
        page.wait_for_url(f"**/{lesson.stem}.html")
        expected = sum(mermaid_blocks(_notebook(lesson)))
        # Wait for what the page shows: every diagram settled (drawn, or mermaid's error box), never a fixed time.
        page.wait_for_function(DIAGRAMS_SETTLED_JS, arg=expected, timeout=30_000)
        seen = page.evaluate(READING_JS)
        if seen["blocks"] != expected or seen["drawn"] != expected or seen["warnings"]:
            problems.append(f"{lesson.stem}.html: {expected} mermaid blocks, {seen['blocks']} on the page, "
                            f"{seen['drawn']} drawn as SVG, errors {seen['warnings']}")
        if seen["sources"] != mermaid_sources(_notebook(lesson)):
            problems.append(f"{lesson.stem}.html: the diagrams' source as mermaid reads it differs from the notebook's "
                            f"```mermaid blocks: {seen['sources']}")
        nav = page.evaluate(NAV_JS)
        wanted_prev = f"{LESSONS[number - 1].stem}.html" if number else None
        wanted_next = f"{LESSONS[number + 1].stem}.html" if number + 1 < len(LESSONS) else None
        # The last lesson's "Next:" line leads back to the lab's map in the first one.
        wanted_line = wanted_next or f"{LESSONS[0].stem}.html"
        if nav != {"index": ["index.html"] * 2, "prev": [wanted_prev] * 2 if wanted_prev else [],
                   "next": [wanted_next] * 2 if wanted_next else [], "nextLine": wanted_line}:
            problems.append(f"{lesson.stem}.html: navigation {nav}; wanted previous {wanted_prev}, next {wanted_next}")
        page.screenshot(path=str(SCREENSHOTS / f"reading-copy.{lesson.stem}.png"))
        drawn = page.locator(".jp-RenderedMermaid")
        for k in range(drawn.count()):
            drawn.nth(k).screenshot(path=str(SCREENSHOTS / f"reading-copy.{lesson.stem}.diagram-{k + 1}.png"))
        if wanted_next:
            page.locator("nav.reading-nav.top a.next").click()
    page.locator("nav.reading-nav.bottom a.index").click()
    page.wait_for_url("**/index.html")
    page.close()
    if guard.refused:
        problems.append(f"the reading copy asked for something beyond this machine: {sorted(set(guard.refused))}")
    if page_errors:
        problems.append(f"JavaScript errors: {page_errors}")
    RESULTS.append(f"reading copy: built and checked offline in {time.perf_counter() - started:.1f} s, "
                   f"{len(LESSONS)} lessons, {sum(sum(mermaid_blocks(_notebook(p))) for p in LESSONS)} diagrams; "
                   f"{'FAILED' if problems else 'ok'}")
    assert not problems, "\n".join(problems)
