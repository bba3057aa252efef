"""The documentation site: every page in the navigation, every picture present, a strict MkDocs build without
a single warning, and every complete DAG on the pages importable against the real operators.

The site's configuration is ``.ci/mkdocs.yml`` (MkDocs refuses a configuration file inside its ``docs_dir``);
``bash .ci/docs`` runs the same build. The build needs the ``docs`` extra; without it that test is skipped.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
CONFIG = REPO / ".ci" / "mkdocs.yml"

# ![alt](target "title") and <img src="target">; the alt text may span lines.
IMAGE_LINK = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
IMAGE_TAG = re.compile(r"<img\s[^>]*\bsrc=[\"']([^\"']+)[\"']", re.IGNORECASE)
FENCE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _load_config() -> dict:
    yaml = pytest.importorskip("yaml")

    class Loader(yaml.SafeLoader):
        """Reads the ``!!python/name:`` tags of the Markdown extensions as plain strings."""

    Loader.add_multi_constructor(
        "tag:yaml.org,2002:python/name:", lambda loader, suffix, node: f"python/name:{suffix}"
    )
    return yaml.load(CONFIG.read_text(encoding="utf-8"), Loader=Loader)


def _nav_pages(entry: object) -> list[str]:
    if isinstance(entry, str):
        return [] if "://" in entry else [entry]
    if isinstance(entry, list):
        return [page for item in entry for page in _nav_pages(item)]
    if isinstance(entry, dict):
        return [page for value in entry.values() for page in _nav_pages(value)]
    return []


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def test_config_points_at_docs_and_builds_outside_it() -> None:
    config = _load_config()
    assert (CONFIG.parent / config["docs_dir"]).resolve() == DOCS
    site = (CONFIG.parent / config["site_dir"]).resolve()
    assert DOCS not in site.parents and site != DOCS
    assert config.get("strict") is True


def test_every_page_is_in_the_navigation_and_every_nav_entry_exists() -> None:
    nav = _nav_pages(_load_config()["nav"])
    pages = {page.relative_to(DOCS).as_posix() for page in _pages()}
    assert sorted(pages - set(nav)) == [], "pages missing from the nav in .ci/mkdocs.yml"
    assert sorted(set(nav) - pages) == [], "nav entries without a page in docs/"
    assert len(nav) == len(set(nav)), "a page is in the nav twice"


def test_every_referenced_image_exists() -> None:
    missing = []
    count = 0
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        for target in IMAGE_LINK.findall(text) + IMAGE_TAG.findall(text):
            if "://" in target or target.startswith("data:"):
                continue
            count += 1
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if not path.is_file():
                missing.append(f"{page.relative_to(REPO)}: {target}")
    assert missing == []
    assert count >= 2  # at least the two pictures of concepts.md


def test_concepts_pictures_are_current() -> None:
    """The SVGs in docs/images are what docs/images/concepts_figures.py draws."""
    sys.path.insert(0, str(DOCS / "images"))
    try:
        import concepts_figures
    finally:
        sys.path.remove(str(DOCS / "images"))
    images = DOCS / "images"
    assert (images / "queue-table.svg").read_text(encoding="utf-8") == concepts_figures.queue_table()
    assert (images / "receive-flow.svg").read_text(encoding="utf-8") == concepts_figures.receive_flow()


@pytest.mark.slow  # about five seconds
def test_strict_build_has_no_warnings(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    pytest.importorskip("material", reason="the docs extra is not installed")
    pytest.importorskip("mkdocstrings_handlers.python", reason="the docs extra is not installed")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(CONFIG), "--site-dir", str(tmp_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    warnings = [line for line in output.splitlines() if "WARNING" in line or "ERROR" in line]
    assert result.returncode == 0 and warnings == [], output
    assert (tmp_path / "index.html").is_file()
    assert (tmp_path / "images" / "queue-table.svg").is_file()
    api = (tmp_path / "api" / "transport.html").read_text(encoding="utf-8")
    for name in ("open_transport", "TableQueue", "QueueAddress", "MessagePump", "TransientDatabaseError"):
        assert name in api


@pytest.mark.slow
def test_complete_dags_on_the_pages_import(tmp_path: Path) -> None:
    """Every code block that builds a DAG imports: the operators accept the arguments the pages show."""
    pytest.importorskip("airflow.sdk", reason="the airflow extra is not installed")
    dags = tmp_path / "dags"
    dags.mkdir()
    written = []
    for page in _pages():
        for number, block in enumerate(FENCE.findall(page.read_text(encoding="utf-8"))):
            if "with DAG(" in block and "dag_id=" in block:
                name = f"{page.stem.replace('-', '_')}_{number}.py"
                (dags / name).write_text(block, encoding="utf-8")
                written.append(name)
    assert len(written) >= 8
    script = (
        "import sys\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        "bag = DagBag(sys.argv[1])\n"
        "for path, error in sorted(bag.import_errors.items()):\n"
        "    print(f'IMPORT ERROR {path}: {error}')\n"
        "print('DAGS', sorted(bag.dag_ids))\n"
    )
    env = dict(os.environ, AIRFLOW_HOME=str(tmp_path / "home"), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    result = subprocess.run(
        [sys.executable, "-c", script, str(dags)], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "IMPORT ERROR" not in result.stdout, result.stdout
    found = re.search(r"^DAGS (.*)$", result.stdout, re.MULTILINE)
    assert found is not None, result.stdout + result.stderr
    assert found.group(1).count("'") // 2 == len(written), result.stdout
