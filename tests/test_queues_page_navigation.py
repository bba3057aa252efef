"""The Queues page's entry in Airflow's navigation: a top-level entry whose light and dark icons the page's
own app serves (the browser check, tests/browser/airflow_ui_check.py, clicks it and checks the icon
loaded in Airflow 3.3's UI)."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree

import pytest
from fastapi.testclient import TestClient

from airflow_provider_sqlqueue.hooks.queues_page_link import QUEUES_PAGE, URL_PREFIX
from airflow_provider_sqlqueue.plugins import SqlQueuePlugin
from airflow_provider_sqlqueue.plugins.queues_app import NAVIGATION_ICONS, create_app


def test_the_entry_is_at_the_top_level_with_an_icon_for_each_mode() -> None:
    (view,) = SqlQueuePlugin.external_views
    assert view["href"] == QUEUES_PAGE and view["destination"] == "nav" and view["nav_top_level"] is True
    assert "category" not in view, "a category would put the entry back under a menu"
    icons = {view["icon"], view["icon_dark_mode"]}
    assert icons == {f"{URL_PREFIX}/icons/{name}.svg" for name in NAVIGATION_ICONS}


@pytest.mark.parametrize("name", NAVIGATION_ICONS)
def test_the_app_serves_each_icon_as_an_svg_image(name: str) -> None:
    answer = TestClient(create_app()).get(f"/icons/{name}.svg")
    assert answer.status_code == 200 and answer.headers["content-type"] == "image/svg+xml"
    assert ElementTree.fromstring(answer.content).tag == "{http://www.w3.org/2000/svg}svg"


def test_the_light_and_dark_icons_differ() -> None:
    client = TestClient(create_app())
    light, dark = (client.get(f"/icons/{name}.svg").content for name in NAVIGATION_ICONS)
    assert light != dark


@pytest.mark.parametrize("name", ["other", "..%2Fqueues_app.py", "queues.svg%00"])
def test_no_other_file_is_served_as_an_icon(name: str) -> None:
    assert TestClient(create_app()).get(f"/icons/{name}.svg").status_code == 404
