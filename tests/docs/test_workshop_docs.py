"""The workshop documents: each one's relative links lead to a file (and a heading, when they name
one), and every command they show exists: `make` targets in the Makefile, `python -m labkit`
commands in labkit's command line, paths under scripts/, tests/, docs/, binder/ in the repository.
The one-click environments' files are there and well-formed."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from labkit import cli

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted(
    [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CODE_OF_CONDUCT.md", *(ROOT / "docs").glob("*.md")]
)
NAMES = [str(path.relative_to(ROOT)) for path in DOCUMENTS]
WORKSHOP = ["docs/setup.md", "docs/cheatsheet.md", "docs/glossary.md", "docs/learners.md", "docs/pre-workshop.md",
            "docs/getting-help.md", "CODE_OF_CONDUCT.md", "CONTRIBUTING.md", "LICENSE", "LICENSE-text", "CITATION.cff"]


def code_of(text: str) -> list[str]:
    """The command-like text: fenced code blocks' lines and inline code spans."""
    fenced = [line for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S) for line in block.splitlines()]
    outside = re.sub(r"```.*?```", "", text, flags=re.S)
    return fenced + re.findall(r"`([^`\n]+)`", outside)


def make_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", makefile, re.M))
    variables = dict(re.findall(r"^([A-Z_]+)\s*:?=\s*(\S+)", makefile, re.M))
    for rule in re.findall(r"^(\$\([A-Z_]+\)):", makefile, re.M):  # $(STAMP): .venv/.installed
        value = rule
        while (found := re.fullmatch(r"(.*)\$\(([A-Z_]+)\)(.*)", value)) and found.group(2) in variables:
            value = found.group(1) + variables[found.group(2)] + found.group(3)
        targets.add(value)
    return targets


def labkit_commands() -> set[str]:
    parser = cli._parser()
    [commands] = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return set(commands.choices)


def anchors_of(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    slugs = set(re.findall(r'<a id="([^"]+)"', text))
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        slugs.add(slug)
    return slugs


def test_the_workshop_material_is_there():
    assert not [name for name in WORKSHOP if not (ROOT / name).is_file()]
    assert "MIT License" in (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "CC BY 4.0" in (ROOT / "LICENSE-text").read_text(encoding="utf-8")
    citation = (ROOT / "CITATION.cff").read_text(encoding="utf-8")
    assert re.search(r"^cff-version: 1\.2\.0$", citation, re.M) and re.search(r"^title: ", citation, re.M)
    assert re.search(r"^authors:\n  - ", citation, re.M) and "license: MIT" in citation


@pytest.mark.parametrize("document", NAMES)
def test_every_relative_link_leads_to_a_file_and_heading(document):
    path = ROOT / document
    text = path.read_text(encoding="utf-8")
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in anchors_of(linked):
            broken.append(target)
    assert not broken, f"{document}: links to nothing: {broken}"


@pytest.mark.parametrize("document", NAMES)
def test_every_command_shown_exists(document):
    text = (ROOT / document).read_text(encoding="utf-8")
    targets, commands, missing = make_targets(), labkit_commands(), []
    for code in code_of(text):
        for words in re.findall(r"(?:^\s*|[;&|]\s*|\$ )make ((?:[a-z.][\w./-]*\s*)+)", code):
            for word in words.split():
                if word not in targets:
                    missing.append(f"make {word}")
        for command in re.findall(r"python -m labkit ([a-z][a-z-]*)", code):
            if command not in commands:
                missing.append(f"python -m labkit {command}")
        for shown in re.findall(r"(?<![\w/.])((?:scripts|tests|docs|binder|tools)/[\w./-]*\w)", code):
            if not (ROOT / shown).exists() and "NN" not in shown and "*" not in shown:
                missing.append(shown)
    assert not missing, f"{document} shows commands or paths that do not exist: {sorted(set(missing))}"


def test_the_one_click_environments():
    container = json.loads((ROOT / ".devcontainer" / "devcontainer.json").read_text(encoding="utf-8"))
    assert "python:3.11" in container["image"]
    assert "make .venv/.installed" in container["postCreateCommand"] and ".venv/.installed" in make_targets()
    binder = ROOT / "binder"
    assert (binder / "runtime.txt").read_text(encoding="utf-8").strip() == "python-3.11"
    requirements = (binder / "requirements.txt").read_text(encoding="utf-8")
    assert "-r ../requirements.txt" in requirements and re.search(r"^notebook==", requirements, re.M)
    for script in ("postBuild", "start"):
        assert (binder / script).stat().st_mode & 0o111, f"binder/{script} must be executable"
    start = (binder / "start").read_text(encoding="utf-8")
    assert "LABKIT_DATA_DIR" in start and 'exec "$@"' in start
