"""The launch menu of the chapters: Binder and JupyterHub (nbgitpuller) links built from _config.yml.

An instructor sets ``repository.url``, ``repository.branch`` and the launch URLs in
_config.yml; these tests check that the links the theme generates point at that
repository and branch, open the chapter's own source file (which exists in the
repository) in JupyterLab, and are well-formed URLs.  The second test builds a
small variant of the book with a JupyterHub, another repository and another branch,
so the settings are shown to be honoured, not just the defaults.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
import yaml

from conftest import ROOT

pytestmark = pytest.mark.slow

CHAPTER = "book/hardware"


def launch_links(page: Path) -> list[str]:
    hrefs = re.findall(r'href="([^"]+)"', page.read_text())
    return [h.replace("&amp;", "&") for h in hrefs if "/v2/gh/" in h or "/git-pull?" in h]


def check_binder(url: str, binder: str, org: str, repo: str, branch: str, doc: str) -> None:
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}" == binder.rstrip("/"), url
    assert parts.path == f"/v2/gh/{org}/{repo}/{branch}", url
    urlpath = parse_qs(parts.query)["urlpath"]
    assert urlpath == [f"lab/tree/{doc}.md"], url
    assert (ROOT / f"{doc}.md").is_file()


def check_hub(url: str, hub: str, repo_url: str, repo: str, branch: str, doc: str) -> None:
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}" == hub.rstrip("/"), url
    assert parts.path == "/hub/user-redirect/git-pull", url
    query = parse_qs(parts.query)
    assert query["repo"] == [repo_url] and query["branch"] == [branch], url
    # nbgitpuller clones into a folder named after the repository, then opens the file in it
    assert [unquote(p) for p in query["urlpath"]] == [f"lab/tree/{repo}/{doc}.md"], url
    assert (ROOT / f"{doc}.md").is_file()


def test_chapters_offer_binder_on_the_configured_repository_and_branch(book):
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo_url, branch = config["repository"]["url"], config["repository"]["branch"]
    org, repo = urlsplit(repo_url).path.strip("/").split("/")[:2]
    links = launch_links(book.html / f"{CHAPTER}.html")
    binder = [u for u in links if "/v2/gh/" in u]
    assert len(binder) == 1, links
    check_binder(binder[0], config["launch_buttons"]["binderhub_url"], org, repo, branch, CHAPTER)
    assert not [u for u in links if "/git-pull?" in u]  # no hub configured by default: no button


def test_an_instructors_hub_repository_and_branch_reach_the_links(tmp_path):
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo_url, branch, hub = "https://github.com/some-university/perf-course", "fall-2026", "https://hub.example.edu"
    config["repository"].update(url=repo_url, branch=branch)
    config["launch_buttons"]["jupyterhub_url"] = hub
    # paths in _config.yml are relative to its folder: this copy lives elsewhere
    config["sphinx"]["local_extensions"] = {"offline_book": str(ROOT / "book" / "_ext")}
    config["execute"]["cache"] = str(ROOT / "_build" / ".jupyter_cache")  # nothing re-executes
    (tmp_path / "_config.yml").write_text(yaml.safe_dump(config))
    (tmp_path / "_toc.yml").write_text(yaml.safe_dump(
        {"format": "jb-book", "root": "book/intro", "chapters": [{"file": CHAPTER}]}))
    out = tmp_path / "out"
    result = subprocess.run(
        [str(Path(sys.executable).parent / "jupyter-book"), "build", str(ROOT), "--config",
         str(tmp_path / "_config.yml"), "--toc", str(tmp_path / "_toc.yml"), "--path-output", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    links = launch_links(out / "_build" / "html" / f"{CHAPTER}.html")
    binder = [u for u in links if "/v2/gh/" in u]
    hubs = [u for u in links if "/git-pull?" in u]
    assert len(binder) == 1 and len(hubs) == 1, links
    check_binder(binder[0], config["launch_buttons"]["binderhub_url"], "some-university", "perf-course", branch,
                 CHAPTER)
    check_hub(hubs[0], hub, repo_url, "perf-course", branch, CHAPTER)
