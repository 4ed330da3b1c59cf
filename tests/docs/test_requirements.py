"""The two requirement sets: requirements.txt (what a learner needs to run every lesson: `make lab`,
00_setup_check) and requirements-dev.txt (what developing and testing adds: `make test`).

Both are exact and complete: every distribution in the environment the tests run in is pinned in one
of them (the pip freeze of a fresh venv), no name is pinned twice, and what labkit and the lessons
import is in the learner's set, while what only the tests and checks use is not.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LEARNER = ROOT / "requirements.txt"
DEV = ROOT / "requirements-dev.txt"


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            assert norm(name) not in found, f"{path.name} pins {name} twice"
            found[norm(name)] = version
    return found


def first_block(path: Path) -> set[str]:
    head = path.read_text(encoding="utf-8").split("# ---")[0]
    return {norm(line.split("==")[0]) for line in head.splitlines() if "==" in line and not line.startswith("#")}


def imported_modules(sources: list[str]) -> set[str]:
    names = set()
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:  # a notebook cell with IPython magics: take its plain import lines
            tree = ast.parse("\n".join(line for line in source.splitlines() if re.match(r"\s*(import|from)\s", line)))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"labkit", "__future__"}


def distributions_of(modules: set[str]) -> dict[str, str]:
    table = importlib.metadata.packages_distributions()
    return {module: norm(table[module][0]) for module in modules if module in table}


def test_the_sets_do_not_overlap_and_dev_builds_on_the_learners():
    learner, dev = pins(LEARNER), pins(DEV)
    assert not set(learner) & set(dev), "a package pinned in both files"
    assert "-r requirements.txt" in DEV.read_text(encoding="utf-8")
    assert "-e ." in LEARNER.read_text(encoding="utf-8")
    for tool in ("ruff", "mypy", "hypothesis", "types-jsonschema"):
        assert tool in dev and tool not in learner, tool


def test_what_labkit_and_the_lessons_import_is_in_the_learners_set():
    sources = [path.read_text(encoding="utf-8") for path in (ROOT / "labkit").rglob("*.py")]
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        sources += ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]
    modules = imported_modules(sources)
    assert {"pandas", "jsonschema", "dbos", "nbformat"} <= modules
    learner = pins(LEARNER)
    missing = {module: dist for module, dist in distributions_of(modules).items() if dist not in learner}
    assert not missing, f"imported by labkit or a lesson but not in requirements.txt: {missing}"
    assert not set(distributions_of(modules).values()) & set(pins(DEV)), "a lesson imports a developers' tool"


def test_every_distribution_of_this_environment_is_pinned_at_its_version():
    """The pip freeze of the venv the tests run in (made from requirements-dev.txt) is the two sets."""
    pinned = pins(LEARNER) | pins(DEV)
    # `make browser-test` and `make test-broker` add these to the same .venv
    extras = pins(ROOT / "requirements-browser.txt") | pins(ROOT / "requirements-broker.txt")
    installed = {norm(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()}
    if not set(pinned) <= set(installed):
        pytest.skip(f"this environment is not made from requirements-dev.txt: {sorted(set(pinned) - set(installed))[:3]} ...")
    wrong = {name: (installed[name], version) for name, version in pinned.items() if installed[name] != version}
    assert not wrong, f"installed (left) differs from the pin (right): {wrong}"
    unpinned = set(installed) - set(pinned) - set(extras) - {"labkit", "pip", "setuptools", "wheel"}
    # pip never removes what a pin no longer asks for: a venv made before a pin changed keeps it.
    assert not unpinned, f"installed but pinned in neither file: {sorted(unpinned)} (left by an older pin? `make clean test`)"


def test_make_lab_installs_the_learners_set_without_npm_and_make_test_adds_the_rest():
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    rules = {block.split(":")[0]: block for block in re.split(r"\n(?=\S)", make)}
    learner_rule = rules["$(STAMP)"]
    assert "-r requirements.txt" in learner_rule and "npm" not in learner_rule and "requirements-dev" not in learner_rule
    assert "ensure_venv.sh" in learner_rule
    dev_rule = rules["$(DEV_STAMP)"]
    assert "-r requirements-dev.txt" in dev_rule and "npm ci" in dev_rule
    assert re.search(r"^lab: \$\(STAMP\)$", make, re.M)
    for target in ("test", "unit", "soak", "test-under-load"):
        assert re.search(rf"^{target}: \$\(DEV_STAMP\)$", make, re.M), target


def test_langsmiths_pytest_plugin_is_blocked_by_its_entry_point_name(pytestconfig):
    """LangGraph (requirements.txt) brings langsmith, whose pytest plugin would load into every test run;
    pyproject's addopts block it by its entry point's name, which a rename upstream would silently miss."""
    names = {point.name for point in importlib.metadata.entry_points(group="pytest11") if point.value.startswith("langsmith")}
    if not names:
        pytest.skip("langsmith is not installed here: no plugin to block")
    assert all(pytestconfig.pluginmanager.is_blocked(name) for name in names), names
    assert "langsmith.pytest_plugin" not in sys.modules


def test_reading_a_notebook_builds_no_grammar_parsers():
    """The reason requirements.txt holds jsonschema at 4.24 (its comment there): nothing reads the grammar."""
    import subprocess

    code = "import sys, nbformat, jsonschema; print(sorted({'rfc3987_syntax', 'lark'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", f"importing nbformat loaded {done.stdout.strip()}: see jsonschema's pin"
