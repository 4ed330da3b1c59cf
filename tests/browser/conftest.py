"""The real-browser test's machinery: JupyterLab on a copy of the lessons, and the system's Chromium.

This folder is collected only when it is asked for (``python -m pytest tests/browser``, which
``make browser-test`` runs) or when LABKIT_BROWSER_TEST=1: ``make test`` and ``make unit`` name
``tests`` and never start a browser. The test needs what ``requirements-browser.txt`` pins
(Playwright for Python) and a Chromium on the machine (Debian's ``chromium`` package, found as
``chromium`` on PATH or at LABKIT_CHROMIUM); Playwright's own browser download is never used.
Without them the test is skipped with the reason, except in CI (CI set), where it fails.

JupyterLab listens on 127.0.0.1 only, on a free port, with a fresh random token, and serves the
notebooks/ of a temporary copy of the repository (a lesson reads the files around its folder, as
it does in my-lab/): running every cell changes outputs and JupyterLab saves, so the committed
lessons are never opened. Its configuration, settings, workspaces and IPython profile are
temporary folders too, so a developer's own settings cannot change what the test sees.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from browserlab import NOTEBOOKS, RESULTS, ROOT, SCREENSHOTS, JupyterLab, unavailable

HERE = Path(__file__).resolve().parent
CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root, where Chromium's sandbox cannot start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",  # no calls home: the machine's network is closed
    "--disable-component-update",
    "--disable-sync",
]

_STARTED = time.perf_counter()

# --------------------------------------------------------------------------- collected only on request


def _asked_for(config: pytest.Config) -> bool:
    if os.environ.get("LABKIT_BROWSER_TEST") == "1":
        return True
    start = Path(config.invocation_params.dir)
    for arg in config.args:
        path = (start / arg.split("::", 1)[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.name.startswith("test_") and not _asked_for(config):
        return True
    return None


def pytest_sessionstart(session: pytest.Session) -> None:
    global _STARTED
    _STARTED = time.perf_counter()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if RESULTS:  # also where pytest-xdist's workers keep their output to themselves
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        took = f"browser test took {time.perf_counter() - _STARTED:.1f} s in all"
        (SCREENSHOTS / "browser-test.txt").write_text("\n".join([*RESULTS, took]) + "\n")


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not RESULTS:
        return
    terminalreporter.section("browser test")
    for line in RESULTS:
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"browser test took {time.perf_counter() - _STARTED:.1f} s in all; screenshots in "
                                f"{SCREENSHOTS.relative_to(ROOT)}/")


# --------------------------------------------------------------------------- what the machine must have


def chromium_path() -> str:
    named = os.environ.get("LABKIT_CHROMIUM")
    if named:
        if not os.access(named, os.X_OK):
            unavailable(f"LABKIT_CHROMIUM={named} is not an executable file")
        return named
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    unavailable("no Chromium on this machine: install Debian's package (apt-get install -y chromium) "
                "or set LABKIT_CHROMIUM to a Chromium executable")
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("Playwright for Python is not installed: python -m pip install -r requirements-browser.txt")
    executable = chromium_path()
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        RESULTS.append(f"browser: {executable}, Chromium {chromium.version}")
        yield chromium
        chromium.close()


@dataclass
class Guard:
    """Requests that left this machine (refused): a page must draw everything from 127.0.0.1 or files."""

    refused: list[str]

    def route(self, route) -> None:
        url = route.request.url
        scheme, _, rest = url.partition(":")
        host = rest.lstrip("/").split("/", 1)[0].rsplit("@", 1)[-1]
        host = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
        if scheme in ("data", "blob", "file", "about") or host in ("127.0.0.1", "localhost", "[::1]"):
            route.continue_()
        else:
            self.refused.append(url)
            route.abort("internetdisconnected")


@pytest.fixture
def offline_context(browser):
    """A fresh browser context whose requests beyond this machine are refused and recorded."""
    guard = Guard(refused=[])
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.route("**/*", guard.route)
    context.set_default_timeout(60_000)
    yield context, guard
    context.close()


# --------------------------------------------------------------------------- JupyterLab on a copy


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


SCRATCH = shutil.ignore_patterns(".*", "__pycache__", "*.egg-info", "*.db", "*.db-*", "*.jsonl", "build", "my-lab")


def _copy_of_the_repository(target: Path) -> Path:
    """The repository's files (not .git, .venv, build/, my-lab/ or what git ignores) copied to target.

    A lesson runs in its folder inside a clone (notebooks/, or the learner's my-lab/) and may read
    the files beside it (00_setup_check compares the repository's labkit/, data/ and pins with what
    its kernel imports), so the copy keeps the repository's layout around notebooks/.
    """
    listed = None
    if (ROOT / ".git").exists() and shutil.which("git"):
        done = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                              cwd=ROOT, capture_output=True, check=False)
        if done.returncode == 0:
            listed = [Path(name) for name in done.stdout.decode().split("\0") if name]
    if listed is None:
        shutil.copytree(ROOT, target, ignore=SCRATCH)
    else:
        for relative in listed:
            if relative.parts[0].startswith(".") or not (ROOT / relative).is_file():
                continue
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / relative, target / relative)
    return target


def _write_json(path: Path, content: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content, indent=2) + "\n")


@pytest.fixture(scope="session")
def jupyterlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterLab]:
    base = tmp_path_factory.mktemp("jupyterlab")
    lessons = _copy_of_the_repository(base / "lab") / NOTEBOOKS.name
    settings = base / "lab-settings"
    # Every cell attached to the page (not only those in view), so each one can be checked; no blank
    # screen's height after the last cell in the screenshots.
    _write_json(settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings",
                {"windowingMode": "none", "scrollPastEnd": False})
    # No news feed and no update check: both would ask the network, and their notice covers the page.
    _write_json(settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings",
                {"fetchNews": "false", "checkForUpdates": False})
    env = dict(os.environ)
    env.update(
        JUPYTER_CONFIG_DIR=str(base / "config"),
        JUPYTER_DATA_DIR=str(base / "data"),
        JUPYTER_RUNTIME_DIR=str(base / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(base / "workspaces"),
        IPYTHONDIR=str(base / "ipython"),
    )
    for name in ("LABKIT_DATA_DIR", "LABKIT_CLOCK"):
        env.pop(name, None)
    port, token = _free_port(), secrets.token_hex(24)
    command = [
        sys.executable, "-m", "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={lessons}",
        f"--IdentityProvider.token={token}",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    log = base / "jupyterlab.log"
    with log.open("w") as output:
        server = subprocess.Popen(command, cwd=lessons, env=env, stdout=output, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
    lab = JupyterLab(url=f"http://127.0.0.1:{port}", token=token, root=lessons, log=log)
    try:
        deadline = time.monotonic() + 120
        while True:
            if server.poll() is not None:
                pytest.fail(f"JupyterLab exited with {server.returncode} before it answered:\n{lab.log_tail()}", pytrace=False)
            try:
                lab.api("GET", "/api/status")
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not answer on {lab.url} within 120 s:\n{lab.log_tail()}", pytrace=False)
                time.sleep(0.25)
        yield lab
    finally:
        server.terminate()  # SIGTERM: the server shuts its kernels down and exits
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
