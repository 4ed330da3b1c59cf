"""The README says what the lab does: its console example is what the commands print, its layout names
every module and script, and the stale statements issue 21 listed stay fixed."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def console_blocks(text: str) -> list[str]:
    return re.findall(r"```console\n(.*?)```", text, re.S)


def test_the_console_example_is_what_the_commands_print(tmp_path):
    """Run each `$ ` line in an empty folder; a command killed by SIGKILL shows as the shell's "Killed"."""
    [block] = [b for b in console_blocks(README) if "labkit run" in b]
    shown, printed = [], []
    for line in block.rstrip("\n").split("\n"):
        shown.append(line)
        if not line.startswith("$ "):
            continue
        words = shlex.split(line[2:])
        assert words[:2] == ["python", "-m"], line
        done = subprocess.run([sys.executable, *words[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        printed.append(line)
        printed += done.stdout.rstrip("\n").split("\n") if done.stdout else []
        if done.returncode == -9:
            printed.append("Killed")
        else:
            assert done.returncode == 0, (line, done.stderr)
    assert printed == shown


def test_the_layout_names_every_module_and_script():
    layout = README[README.index("## How the lab is laid out"):]
    layout = layout[:layout.index("\n## ")]
    modules = [p for p in (ROOT / "labkit").rglob("*.py") if not re.fullmatch(r"lesson\d\d_\w+\.py", p.name)]
    missing = sorted(str(p.relative_to(ROOT)) for p in modules if p.name not in layout)
    assert not missing, f"the README's layout does not name: {missing}"
    scripts = [p.name for p in (ROOT / "scripts").iterdir() if p.is_file() or p.name == "mutants"]
    assert not [name for name in scripts if name not in layout], "a script the layout does not name"


def test_the_stale_statements_of_issue_21_stay_fixed():
    assert "fourteen" not in README and "fifteen" in README
    assert len(list((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))) == 15
    assert "design document" not in README, "not in the repository"
    assert "Scripts\\python" not in README and "WSL" in README, "labkit imports fcntl: no native Windows"
    assert ".backup" not in README and "my-lab/backups/" in README
    assert "only Python" not in README
    start = README.index("## Start")
    timings = README.index("How long `make test` takes")
    assert start < README.index("## The lessons") < README.index("PostgreSQL") and README.index("## The lessons") < timings, (
        "the learner's part comes first; test timings and PostgreSQL below"
    )
