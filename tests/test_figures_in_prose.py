"""No measured figure is typed into a published page: each comes from committed data through a generated
block of benchmarks/render.py (tests/test_rendered_pages.py checks the blocks against their data)."""

from __future__ import annotations

import json
import re

import prose_figures
from prose_figures import ALLOWED, REPO, published_pages, stale_allowances, typed_figures, unexplained_figures

_PLACEHOLDER = re.compile(r"\{[a-z_0-9]+\}")


def test_no_page_types_a_figure_outside_its_generated_blocks() -> None:
    found = [entry for page in published_pages() for entry in unexplained_figures(page)]
    assert not found, (
        "figures typed into prose (render them from data through a generated block, say it without a "
        "number, or, if it is a setting, a default, a target or an input's size, add it to ALLOWED in "
        "tests/prose_figures.py with the reason):\n" + "\n".join(found)
    )


def test_every_allowance_still_excuses_a_figure_and_says_why() -> None:
    assert not stale_allowances(), stale_allowances()
    assert all(reason.strip() for figures in ALLOWED.values() for reason in figures.values())


def test_a_typed_figure_is_found_and_one_in_a_generated_block_or_code_is_not() -> None:
    page = "\n".join(
        [
            "The drain ran at 31,563 msgs/s, 0.59x the baseline, in about 12 s.",
            "<!-- generated block demo: rendered by benchmarks/render.py from x; edit the data -->",
            "The stream ran at 29,103 msgs/s (0.50x).",
            "<!-- end of generated block demo -->",
            "```",
            "sleep 5s  # 100 MB",
            "```",
            "Set `idle_delay` to `0.5 s`; the storage came back 242 s and 285 s after the drain (12 %).",
        ]
    )
    assert list(typed_figures(page)) == [
        (1, "31,563 msgs/s"),
        (1, "0.59x"),
        (1, "about 12 s"),
        (8, "242 s"),
        (8, "285 s"),
        (8, "12 %"),
    ]


def test_a_page_with_a_typed_figure_fails_the_check(tmp_path, monkeypatch) -> None:
    page = tmp_path / "docs" / "guide.md"
    page.parent.mkdir()
    page.write_text("Receives run at 0.95x of the raw driver.\n", encoding="utf-8")
    monkeypatch.setattr(prose_figures, "REPO", tmp_path)
    assert unexplained_figures(page) == ["docs/guide.md:1: 0.95x"]


def test_data_templates_carry_their_figures_as_measured_fields() -> None:
    """A block template of docs/data/ states a figure through a ``{field}`` of a named run, never in its
    text: a figure in the text would be published as if the run had measured it."""
    typed = []
    for data_file in sorted((REPO / "docs" / "data").glob("*.json")):
        blocks = json.loads(data_file.read_text(encoding="utf-8")).get("blocks", {})
        for name, lines in blocks.items():
            for line in lines:
                text = _PLACEHOLDER.sub("", line["text"])
                typed += [f"{data_file.name}: {name}: {figure}" for _, figure in typed_figures(text)]
    assert not typed, "\n".join(typed)
