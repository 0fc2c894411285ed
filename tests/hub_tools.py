"""Helpers of tests/test_hub.py: local accounts for a class, a JupyterHub process, its REST API,
and logging a student in through Chromium.

Accounts are real (``useradd``, a password for PAM, a home folder under the test's own
folder) and removed at the end (``userdel``); their names carry a prefix so that a test never
meets a human's account.  The hub runs as root in its own folder, marked like the services of
tests/services.py, so that ``services.leftover_processes`` finds it, its proxy, and what they
started.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import services

BIN = Path(sys.executable).parent


# --------------------------------------------------------------------------- accounts


def add_user(name: str, home: Path) -> str:
    """A local account ``name`` (home ``home``, a random password PAM accepts); returns the password."""
    with contextlib.suppress(KeyError):
        pwd.getpwnam(name)
        remove_user(name)                         # a leftover of an interrupted run
    subprocess.run(["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/bash",
                    "--user-group", name], check=True, capture_output=True, text=True)
    password = secrets.token_urlsafe(12)
    subprocess.run(["chpasswd"], input=f"{name}:{password}\n", check=True, capture_output=True, text=True)
    return password


def remove_user(name: str) -> None:
    """Kill what the account still runs (its own processes only), remove it and its group."""
    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        return
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    os.kill(int(entry.name), signal.SIGKILL)
    subprocess.run(["userdel", "--force", name], check=False, capture_output=True)
    subprocess.run(["groupdel", name], check=False, capture_output=True)


def processes_of(name: str) -> dict[int, str]:
    """Live processes owned by the account ``name``: pid -> command line."""
    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        return {}
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid and services._alive(int(entry.name)):
                    found[int(entry.name)] = services._cmdline(int(entry.name))
    return found


# --------------------------------------------------------------------------- the hub


class Hub:
    """``jupyterhub -f <folder>/jupyterhub_config.py`` as root, in ``folder``; its API through a service token."""

    def __init__(self, folder: Path, origin: str, hub_api: str, env: dict[str, str]) -> None:
        self.folder = Path(folder)
        self.origin = origin                      # http://127.0.0.1:<port>: the proxy, what browsers see
        self.api_url = hub_api                    # http://127.0.0.1:<hub port>/hub/api
        self.env = env
        self.token = (self.folder / "api_token").read_text().strip()
        self.process: subprocess.Popen | None = None
        self.log = self.folder / "jupyterhub.log"

    def start(self, timeout: float = 90) -> float:
        """Start the hub (and its proxy); return the seconds until its API and the proxy answer."""
        t0 = time.monotonic()
        env = {**os.environ, **self.env, services.MARKER: str(self.folder),
               "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen([str(BIN / "jupyterhub"), "-f", "jupyterhub_config.py"],
                                            cwd=self.folder, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.api("GET", "/")
                with urllib.request.urlopen(f"{self.origin}/hub/login", timeout=5) as r:
                    if r.status == 200:
                        return time.monotonic() - t0
            except (urllib.error.URLError, OSError):
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"JupyterHub did not start ({self.process.poll()}):\n{self.tail()}")
            time.sleep(0.3)

    def tail(self, n: int = 6000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    def api(self, method: str, path: str, body: dict | None = None, timeout: float = 30):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.api_url + path, data=data, method=method,
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read()
        return json.loads(text) if text else None

    def server(self, user: str) -> dict | None:
        """The user's default server as the hub's API describes it (``None``: not running)."""
        return self.api("GET", f"/users/{user}").get("servers", {}).get("")

    def stop(self) -> None:
        """Stop the hub (SIGTERM: it stops its proxy; servers are left to their Slurm jobs)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process = None

    def stop_servers(self, users: list[str], timeout: float = 60) -> None:
        """Stop every user's server through the API (batchspawner cancels the job); wait until gone."""
        for user in users:
            with contextlib.suppress(urllib.error.HTTPError):
                self.api("DELETE", f"/users/{user}/server")
        deadline = time.monotonic() + timeout
        while any(self.server(u) for u in users) and time.monotonic() < deadline:
            time.sleep(0.5)


# --------------------------------------------------------------------------- the browser


def log_in(driver, origin: str, user: str, password: str, timeout: float = 180) -> float:
    """On the hub's login page: user name, password, *Sign in*; wait until JupyterLab is shown (the hub
    starts the server, a Slurm job, on the way). Returns the seconds it took."""
    from selenium.webdriver.common.by import By

    t0 = time.monotonic()
    driver.get(f"{origin}/hub/logout")           # whoever used the browser before (their server stays)
    driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
    driver.get(f"{origin}/hub/login")
    driver.find_element(By.ID, "username_input").send_keys(user)
    driver.find_element(By.ID, "password_input").send_keys(password)
    driver.find_element(By.ID, "login_submit").click()
    deadline = time.monotonic() + timeout
    lab = f"/user/{user}/lab"
    while time.monotonic() < deadline:
        if lab in driver.current_url and driver.execute_script("return !!window.jupyterapp"):
            return time.monotonic() - t0
        time.sleep(0.3)
    raise AssertionError(f"{user}: JupyterLab not reached in {timeout:.0f} s; at {driver.current_url}:\n"
                         f"{driver.execute_script('return document.body.innerText')[:1500]}")
