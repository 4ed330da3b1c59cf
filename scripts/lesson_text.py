"""Every lesson as text beside its notebook, so that a change to a lesson reads as a diff.

    python scripts/lesson_text.py            # write notebooks/text/NN_name.md for every lesson
    python scripts/lesson_text.py --check    # exit 1 naming each lesson whose text is stale

A notebook is JSON with its outputs inside: a one-word change to a sentence shows up in a review
as a changed line of escaped JSON, beside image data and tables. The text copy is the same
lesson in MyST Markdown, written by jupytext (the tool Jupyter's own projects pair notebooks
with): each cell's source as it reads, its metadata (the exercises' solutions and shortcuts) as
a line of JSON, no outputs. Every lesson is kept the same way: edited as a notebook (JupyterLab,
or nbformat in a script), executed by ``scripts/run_notebooks.py``, and its text rewritten here.
``tests/docs/test_lesson_text.py`` fails while a text copy differs from its notebook, so a
review always sees the text of what is committed.

One-way on purpose: the notebook is the lesson (nbval compares its outputs, the browser test
runs it); the text is a view of it for diffs, never edited by hand.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jupytext
import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
TEXT = NOTEBOOKS / "text"


def lesson_text(notebook_path: Path) -> str:
    """The lesson at ``notebook_path`` as MyST Markdown: sources and metadata, no outputs."""
    notebook = nbformat.read(notebook_path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    notebook.metadata = {"kernelspec": notebook.metadata.get("kernelspec", {})}
    return jupytext.writes(notebook, fmt="md:myst")


def text_path(notebook_path: Path) -> Path:
    return TEXT / f"{notebook_path.stem}.md"


def lessons() -> list[Path]:
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def main(args: list[str]) -> int:
    stale = []
    for path in lessons():
        wanted = lesson_text(path)
        target = text_path(path)
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current == wanted:
            continue
        if "--check" in args:
            stale.append(path.stem)
            continue
        TEXT.mkdir(exist_ok=True)
        target.write_text(wanted, encoding="utf-8")
        print(f"wrote {target.relative_to(ROOT)}")
    known = {text_path(path).name for path in lessons()}
    orphans = sorted(p.name for p in TEXT.glob("*.md") if p.name not in known) if TEXT.exists() else []
    if stale or orphans:
        for stem in stale:
            print(f"{stem}: its text copy is stale: python scripts/lesson_text.py", file=sys.stderr)
        for name in orphans:
            print(f"notebooks/text/{name}: no lesson of that name: remove it", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
