"""The provider in a real Airflow UI, driven by headless Chromium (docs/airflow-ui.md).

Starts a throwaway Airflow 3 on loopback with ``dags_examples/`` (see airflow_stack.py), then, in the
browser:

(a) opens the Add Connection form, picks the ``SQL Queue`` type and checks that every label, placeholder,
    hidden field and extra field the provider declares in ``get_provider_info()`` is shown as declared,
    fills in a SQLite queue file and saves the connection as ``sqlqueue_default``;
(b) triggers ``sqlqueue_sensor_example`` from its Trigger dialog with ``min_messages`` above what its
    producer sends, waits until the run page shows the sensor ``Deferred``, sends the missing messages
    and waits until the page shows the task, the consumer and the run ``Success``; the sensor's task
    instance carries a "Queues page" link, which opens the Queues page with its queue picked;
(c) opens the provider's Queues page from the navigation's top-level Queues entry (its icon loaded), sees
    a queue's depth change after a send, sees the failed-message group a broken handler left in the error
    queue, opens the group and one of its messages (headers, body, stack trace), retries the group with
    one click and sees the messages back in their queue; as admin, is not served a ``postgres``-type
    connection (the answer of an unknown id; nothing connects to its port);
(d) logged in as a viewer (403 on ``/api/v2/connections/sqlqueue_default``), is served no connection: none
    listed, and the page's API answers for ``sqlqueue_default`` exactly as for an unknown id, retry and
    delete included;
(e) logged in as an op, checks the Queues page, a group and a message at 390x844 and 1440 wide in
    Airflow's light and dark modes (no sideways scroll, targets of 24 px or more on screen, contrast of
    4.5:1 or more, computed in the browser), deletes one message from its detail view and then the rest
    of the group from the Queues page, each after the page's confirmation: both move to the archive
    beside the error queue, and Airflow's audit log (REST ``/api/v2/eventLogs``) holds both deletes under
    ``op`` and the admin's retry; a stale tab's retry says why it retried nothing; an ended session sends
    the window to Airflow's login.

In (c) the admin also sees the summary, retries through the page's dialog (Escape closes it, Tab stays in
it), watches a queue drain through the page's auto-refresh and its chart, then, once the depth history
table exists, sees the chart drawn from it (check_stored_depth_history), and gets a sentence for a
shortened group id; with SQLQUEUE_UI_CHECK_POSTGRES, the page runs on PostgreSQL too (check_postgres: the
summary, a group's page and its confirmed retry at 390 px in both modes, the stored history, a message's
and a group's confirmed deletes, the archive's list and a restore).

Everything runs logged in through Airflow's login page, as ``admin``, ``viewer`` and ``op`` (simple auth
manager accounts with random passwords; see airflow_stack.py).

States are read from the page; the REST API only cross-checks them. Screenshots go to ``--images``
(default docs/images). On failure the page is saved as ``airflow-ui-failure.png`` next to the Airflow logs
in the kept temporary home, whose path is printed. Every Airflow process is stopped at the end.

Usage: ``python tests/browser/airflow_ui_check.py [--images DIR] [--timeout SECONDS]``
(needs Debian's ``chromium`` at /usr/bin/chromium and the ``playwright`` package; no browser download).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
import urllib.error
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from airflow_stack import REPO, AirflowStack, wait_for

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DAG_ID = "sqlqueue_sensor_example"
SENSOR = "wait_for_orders"
QUEUE = "orders"
PRODUCED = 10  # what the DAG's producer sends
THRESHOLD = 15  # the min_messages the check triggers with, so the sensor has to defer
CONN_ID = "sqlqueue_default"
QUEUES_LINK = "Queues page"  # the extra link of the sensor and the consumer
QUEUES_PAGE = "/sqlqueue/queues"  # the page's address outside Airflow's frame
FAILING_QUEUE = "payments"
FAILING = 4  # messages a broken handler sends to the error queue in (c)
SENT_TO_ORDERS = 3  # messages (c) sends to watch the depth change
OTHER_TYPE_CONN_ID = "hr_postgres"  # a postgres-type connection the Queues page must never open
USERS = {"admin": "ADMIN", "viewer": "VIEWER", "op": "OP"}
# Standard connection fields: form input name -> the label Airflow gives it when not relabelled.
STANDARD_FIELDS = {
    "description": "Description",
    "host": "Host",
    "login": "Login",
    "password": "Password",
    "port": "Port",
    "schema": "Schema",
}
VIEWPORT = {"width": 1440, "height": 1000}


class CheckFailed(AssertionError):
    pass


def log(message: str) -> None:
    print(f"[ui-check {time.strftime('%H:%M:%S')}] {message}", flush=True)


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def sqlqueue_connection_type() -> dict[str, Any]:
    from airflow_provider_sqlqueue.get_provider_info import get_provider_info

    for entry in get_provider_info()["connection-types"]:
        if entry["connection-type"] == "sqlqueue":
            return entry
    raise CheckFailed("get_provider_info() declares no 'sqlqueue' connection type")


# ---- page helpers ------------------------------------------------------------------------------
def wait_page(
    page: Any,
    what: str,
    probe: Callable[[], Any],
    timeout: float,
    reload_every: float = 20,
    stack: AirflowStack | None = None,
) -> Any:
    """Poll ``probe`` on the page until it returns True (or a non-string truthy value).

    A string is what the page shows instead: one containing "Failed" ends the wait at once. The UI refreshes
    itself while a run is active; the page is reloaded now and then all the same.
    """
    deadline = time.monotonic() + timeout
    last_reload = time.monotonic()
    last_seen: Any = None
    while True:
        try:
            last_seen = probe()
            if last_seen is True or (last_seen and not isinstance(last_seen, str)):
                return last_seen
        except Exception as error:  # the page may be re-rendering; try again
            last_seen = f"error: {error}"
        if isinstance(last_seen, str) and "Failed" in last_seen:
            raise CheckFailed(f"while waiting for {what}, the page shows: {last_seen}")
        if stack is not None:
            stack.check_alive()
        if time.monotonic() > deadline:
            raise CheckFailed(f"timed out after {timeout:.0f} s waiting for {what}; last seen: {last_seen!r}")
        if time.monotonic() - last_reload > reload_every:
            page.reload(wait_until="domcontentloaded")
            last_reload = time.monotonic()
        page.wait_for_timeout(500)


# ---- (a) the connection form -------------------------------------------------------------------
def check_connection_form(page: Any, stack: AirflowStack, queue_file: Path, images: Path) -> None:
    declared = sqlqueue_connection_type()
    behaviour = declared.get("ui-field-behaviour", {})
    relabeling = behaviour.get("relabeling", {})
    placeholders = behaviour.get("placeholders", {})
    hidden = set(behaviour.get("hidden-fields", []))
    extras = declared.get("conn-fields", {})

    page.goto(f"{stack.base_url}/connections", wait_until="domcontentloaded")
    page.get_by_role("button", name="Add Connection").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("heading", name="Add Connection").wait_for(timeout=30_000)
    dialog.locator('input[name="connection_id"]').fill(CONN_ID)
    type_box = dialog.get_by_role("combobox")
    type_box.click()
    type_box.fill(declared["hook-name"])
    page.get_by_role("option", name=declared["hook-name"], exact=True).click()
    dialog.locator('input[name="host"]').wait_for(state="attached", timeout=30_000)

    def field_label(input_name: str) -> str:
        root = dialog.locator('[data-scope="field"][data-part="root"]').filter(
            has=page.locator(f'[name="{input_name}"]')
        )
        return root.locator("label").first.inner_text().strip()

    # Standard fields: relabelled, with the declared placeholders, the hidden ones absent.
    checked = []
    for name, default_label in STANDARD_FIELDS.items():
        control = dialog.locator(f'[name="{name}"]')
        if name in hidden:
            expect(control.count() == 0, f"hidden field {name!r} is shown in the form")
            checked.append(f"{name}: hidden")
            continue
        expect(control.count() == 1, f"standard field {name!r} is missing from the form")
        want = relabeling.get(name, default_label)
        got = field_label(name)
        expect(got == want, f"field {name!r} is labelled {got!r}, the provider declares {want!r}")
        if name in placeholders:
            got_placeholder = control.get_attribute("placeholder")
            expect(
                got_placeholder == placeholders[name],
                f"field {name!r} has placeholder {got_placeholder!r}, declared {placeholders[name]!r}",
            )
        checked.append(f"{name}: {got!r}" + (" + placeholder" if name in placeholders else ""))
    log("standard fields as declared: " + "; ".join(checked))
    dialog.locator('input[name="host"]').fill(str(queue_file))
    page.screenshot(path=str(images / "airflow-ui-connection-form.png"))
    log("screenshot airflow-ui-connection-form.png")

    # Extra fields: label, description as helper text, password fields masked, enum as a select.
    dialog.get_by_role("button", name="Extra Fields", exact=True).click()
    for key, spec in extras.items():
        selector = f'[name="element_{key}"]'
        control = dialog.locator(selector)
        control.wait_for(state="attached", timeout=10_000)
        root = dialog.locator('[data-scope="field"][data-part="root"]').filter(has=page.locator(selector))
        label = root.locator("label").first.inner_text().strip()
        expect(
            label == spec["label"], f"extra field {key!r} is labelled {label!r}, declared {spec['label']!r}"
        )
        if spec.get("description"):
            helper = root.locator('[data-part="helper-text"]').first.inner_text().strip()
            expect(
                helper == spec["description"],
                f"extra field {key!r} describes itself as {helper!r}, declared {spec['description']!r}",
            )
        schema = spec.get("schema", {})
        if schema.get("format") == "password":
            kind = control.get_attribute("type")
            expect(kind == "password", f"extra field {key!r} should be a password input, is {kind!r}")
        if "enum" in schema:
            expect(root.get_by_role("combobox").count() == 1, f"extra field {key!r} is not a select")
            if schema.get("default") is not None:
                value = control.get_attribute("value")
                expect(
                    value == schema["default"],
                    f"extra field {key!r} starts as {value!r}, declared default {schema['default']!r}",
                )
    log(f"extra fields as declared: {', '.join(extras)}")
    page.screenshot(path=str(images / "airflow-ui-connection-extra-fields.png"))
    log("screenshot airflow-ui-connection-extra-fields.png")

    dialog.get_by_role("button", name="Save").click()
    dialog.wait_for(state="hidden", timeout=30_000)
    row = page.get_by_role("row").filter(has_text=CONN_ID)
    wait_page(page, f"connection {CONN_ID} in the connections list", lambda: row.count() == 1, 30)
    expect(
        "sqlqueue" in row.inner_text(),
        f"the saved connection's row does not show type sqlqueue: {row.inner_text()!r}",
    )
    saved = stack.api("GET", f"/api/v2/connections/{CONN_ID}")
    extra = json.loads(saved.get("extra") or "{}")
    # The Engine select has no default (a server is never taken for a SQLite file); left empty, the hook
    # takes an absolute path ending in .db without Port, Login or Password for a SQLite queue file.
    expect(
        saved["conn_type"] == "sqlqueue" and saved["host"] == str(queue_file) and not extra.get("engine"),
        f"REST API shows the saved connection as {saved!r}",
    )
    log(f"connection {CONN_ID} saved from the form (REST: type sqlqueue, no engine, host {queue_file})")


# ---- (b) the deferrable sensor -----------------------------------------------------------------
def task_state(page: Any, task_id: str) -> str:
    row = page.locator("tr").filter(
        has=page.locator(f'[data-testid="table-cell-task_display_name"] [title="{task_id}"]')
    )
    if row.count() != 1:
        return f"(no row for {task_id})"
    return row.locator('[data-testid="table-cell-state"]').inner_text().strip()


def run_state(page: Any) -> str:
    return page.locator('[data-testid="header-card"] [data-testid="state-badge"]').first.inner_text().strip()


def check_sensor_run(page: Any, stack: AirflowStack, queue_file: Path, images: Path) -> None:
    from airflow_provider_sqlqueue.transport import open_transport

    with open_transport(f"sqlite:///{queue_file}") as transport:
        transport.queue(QUEUE).create()
        transport.queue("error").create()
    log(f"queue {QUEUE!r} provisioned in {queue_file}")

    wait_for(f"DAG {DAG_ID} to be parsed", lambda: stack.api("GET", f"/api/v2/dags/{DAG_ID}"), 120)
    page.goto(f"{stack.base_url}/dags/{DAG_ID}", wait_until="domcontentloaded")
    page.get_by_test_id("trigger-dag-button").click()
    dialog = page.get_by_role("dialog")
    threshold = dialog.locator('input[name="element_min_messages"]')
    threshold.wait_for(timeout=30_000)
    threshold.fill(str(THRESHOLD))
    unpause = dialog.get_by_role("checkbox", name=re.compile("Unpause"))
    if unpause.count() and not unpause.is_checked():
        unpause.check(force=True)
    dialog.get_by_role("button", name="Advanced Options").click()
    run_id = f"ui_check_{time.strftime('%Y%m%dT%H%M%S')}"
    dialog.locator('input[name="dagRunId"]').fill(run_id)
    page.screenshot(path=str(images / "airflow-ui-trigger.png"))
    log(f"screenshot airflow-ui-trigger.png (min_messages={THRESHOLD}, run id {run_id})")
    dialog.get_by_role("button", name="Trigger", exact=True).click()
    dialog.wait_for(state="hidden", timeout=30_000)

    run_url = f"{stack.base_url}/dags/{DAG_ID}/runs/{run_id}"
    if not page.url.startswith(run_url):
        page.goto(run_url, wait_until="domcontentloaded")

    started = time.monotonic()
    wait_page(
        page,
        f"the run page to show {SENSOR} Deferred",
        lambda: task_state(page, SENSOR) == "Deferred" or task_state(page, SENSOR),
        180,
        stack=stack,
    )
    log(f"UI shows {SENSOR} Deferred after {time.monotonic() - started:.1f} s; run {run_state(page)}")
    ti = stack.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{SENSOR}")
    expect(ti["state"] == "deferred", f"REST API shows {SENSOR} as {ti['state']!r}, the UI Deferred")
    expect(task_state(page, "produce") == "Success", f"producer shows {task_state(page, 'produce')!r}")
    expect(run_state(page) == "Running", f"the run shows {run_state(page)!r} while the sensor waits")
    page.screenshot(path=str(images / "airflow-ui-sensor-deferred.png"))
    log("screenshot airflow-ui-sensor-deferred.png")

    # The worker that deferred reports "success" to the executor when it exits, seconds later. A trigger
    # that fires before the scheduler took that report makes Airflow fail the resumed task as "changed
    # externally" (apache/airflow#66374, #67287, #72716), so the missing messages go out after it.
    defer_exit = f"state success for task instance TaskInstanceKey(dag_id='{DAG_ID}', task_id='{SENSOR}'"
    wait_for(
        "the scheduler to take the deferring worker's exit (apache/airflow#72716)",
        lambda: defer_exit in (stack.home / "scheduler.log").read_text(errors="replace"),
        60,
    )
    with open_transport(f"sqlite:///{queue_file}") as transport:
        queue = transport.queue(QUEUE)
        depth = queue.peek_estimate()
        more = THRESHOLD - PRODUCED
        queue.send_batch(json.dumps({"order_id": 100 + n, "amount": 1.0}) for n in range(more))
    log(f"queue held {depth}; sent {more} more so it reaches {THRESHOLD}")

    started = time.monotonic()
    wait_page(
        page,
        "the run page to show the run Success",
        lambda: run_state(page) == "Success" or f"run {run_state(page)}, {SENSOR} {task_state(page, SENSOR)}",
        180,
        stack=stack,
    )
    log(f"UI shows the run Success after {time.monotonic() - started:.1f} s")
    for task_id in ("provision", "produce", SENSOR, "consume"):
        wait_page(
            page,
            f"{task_id} Success",
            lambda t=task_id: task_state(page, t) == "Success" or task_state(page, t),
            30,
        )
    page.screenshot(path=str(images / "airflow-ui-run-success.png"))
    log("screenshot airflow-ui-run-success.png")

    run = stack.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")
    expect(run["state"] == "success", f"REST API shows the run as {run['state']!r}")
    xcom = stack.api(
        "GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/consume/xcomEntries/return_value"
    )
    summary = xcom.get("value")
    if isinstance(summary, str):
        summary = json.loads(summary.replace("'", '"'))
    expect(
        summary["received"] == THRESHOLD and summary["depth_seen_by_sensor"] >= THRESHOLD,
        f"consume returned {summary!r}",
    )
    log(f"REST cross-check: run success, consume returned {summary}")
    check_task_links(page, stack, run_id)


def check_task_links(page: Any, stack: AirflowStack, run_id: str) -> None:
    """The sensor's task instance carries a "Queues page" button (an operator extra link, as the REST API
    the UI reads it from lists it) that opens the Queues page of its connection with its queue picked (the
    example's consumer is a plain task)."""
    path = f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{SENSOR}/links"
    link = str(stack.api("GET", path).get("extra_links", {}).get(QUEUES_LINK))
    expected = f"{QUEUES_PAGE}?conn_id={CONN_ID}&queue={QUEUE}#"
    expect(expected in link, f"{SENSOR}'s Queues page link is {link!r}")
    page.goto(link, wait_until="domcontentloaded")
    picked = page.locator("tr.picked")
    picked.wait_for(timeout=30_000)
    shown = picked.get_attribute("data-queue")
    expect(shown == QUEUE, f"{link} picked {shown!r}")
    log(f"{SENSOR}'s Queues page link opens the page with {QUEUE} picked")
    page.goto(f"{stack.base_url}/dags/{DAG_ID}/runs/{run_id}", wait_until="domcontentloaded")


# ---- (c) the Queues page ------------------------------------------------------------------------
def log_in(page: Any, stack: AirflowStack, user: str) -> None:
    page.goto(f"{stack.base_url}/", wait_until="domcontentloaded")
    page.locator('input[name="username"]').fill(user)
    page.locator('input[name="password"]').fill(stack.passwords[user])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"^(?!.*/auth/login).*$"), timeout=30_000)
    # The Queues page's auto-refresh stays off (this browser remembers it) but where a step turns it on.
    page.evaluate("() => localStorage.setItem('sqlqueue-auto-refresh', 'off')")
    log(f"logged in as {user} ({stack.users[user]})")


def queue_depth(frame: Any, queue: str) -> str:
    """The depth the page shows, without its estimate mark (≈): the queues here have no gaps in their
    RowVersions, so the estimate is the exact count."""
    cell = frame.locator(f'#queues tr[data-queue="{queue}"] td.depth')
    return cell.inner_text().strip().lstrip("≈ ") if cell.count() == 1 else f"(no row for {queue})"


def broken(message: Any, context: Any) -> None:
    raise ConnectionError("payment service unreachable")


def fail_messages(queue_file: Path | None, send: int, **database: Any) -> dict[str, str | None]:
    """Send ``send`` messages to FAILING_QUEUE, let a broken handler move all it holds to the error queue,
    and return the error queue's rows as {row Id: NServiceBus.MessageId}. The SQLite ``queue_file``, or
    the database ``open_transport`` takes as ``database`` (url, default_schema)."""
    from airflow_provider_sqlqueue.transport import open_transport
    from airflow_provider_sqlqueue.transport.browse import browse
    from airflow_provider_sqlqueue.transport.pump import MessagePump

    with open_transport(**database) if database else open_transport(f"sqlite:///{queue_file}") as transport:
        queue = transport.queue(FAILING_QUEUE)
        queue.create()
        if send:
            queue.send_batch(f"payment {n}" for n in range(send))
        MessagePump(queue, broken, transaction_mode="none", idle_delay=0.1).run(until_empty=True, timeout=60)
        expect(queue.count() == 0, f"{FAILING_QUEUE} still holds {queue.count()} message(s)")
        return {m.id: m.headers.get("NServiceBus.MessageId") for m in browse(transport.queue("error"), 100)}


def check_queues_page(page: Any, stack: AirflowStack, queue_file: Path, images: Path) -> None:
    from airflow_provider_sqlqueue.transport import open_transport

    entry = page.get_by_role("link", name="Queues")
    icon = entry.locator("img")
    icon.wait_for(timeout=30_000)
    loaded = icon.evaluate("image => image.complete && image.naturalWidth > 0")
    expect(loaded, f"the navigation entry's icon {icon.get_attribute('src')!r} did not load")
    entry.click()
    page.wait_for_url(re.compile(r"/plugin/sqlqueue-queues"), timeout=30_000)
    frame = page.frame_locator("iframe")
    frame.locator("#queues").wait_for(timeout=30_000)
    before = queue_depth(frame, QUEUE)
    expect(before == "0", f"the Queues page shows {QUEUE} with {before!r} messages after the run drained it")
    log(f"Queues page (the navigation's Queues entry, its icon loaded) shows {QUEUE} with {before} messages")

    with open_transport(f"sqlite:///{queue_file}") as transport:
        transport.queue(QUEUE).send_batch(f"order {n}" for n in range(SENT_TO_ORDERS))
    frame.locator("#refresh").click()
    wait_page(
        page,
        f"{QUEUE} at {SENT_TO_ORDERS} messages",
        lambda: queue_depth(frame, QUEUE) == str(SENT_TO_ORDERS) or queue_depth(frame, QUEUE),
        30,
        reload_every=1000,
    )
    log(f"after sending {SENT_TO_ORDERS}, the page shows {QUEUE} with {queue_depth(frame, QUEUE)}")
    for order in ("descending", "ascending"):
        frame.locator("#sort-messages").click()
        frame.locator(f'#queues th[aria-sort="{order}"] #sort-messages').wait_for(timeout=30_000)
    log("the Messages column's header sorts the queues table, descending then ascending")

    failed = fail_messages(queue_file, FAILING)
    expect(len(failed) == FAILING, f"the error queue holds {failed}, not the {FAILING} the handler failed")
    frame.locator("#refresh").click()
    group = frame.locator("#failed tr[data-group]").filter(has_text=FAILING_QUEUE)
    wait_page(page, "the failed group on the page", lambda: group.count() == 1, 30, reload_every=1000)
    text = group.inner_text()
    expect(
        "ConnectionError" in text and "payment service unreachable" in text and str(FAILING) in text,
        f"the failed group reads {text!r}",
    )
    page.screenshot(path=str(images / "airflow-ui-queues.png"))
    log(f"screenshot airflow-ui-queues.png (group: {' | '.join(text.split())})")

    summary = frame.locator("#summary-failed")
    shown_failed = summary.locator(".value").inner_text().strip()
    expect(
        shown_failed == str(FAILING) and "bad" in (summary.get_attribute("class") or ""),
        f"the summary shows {shown_failed!r} failed messages (class {summary.get_attribute('class')!r})",
    )
    log(f"summary: {shown_failed} failed messages, coloured as a problem")
    check_home(page, stack, images)

    check_message_view(page, frame, failed, images)
    frame.locator("#back").click()
    group = frame.locator("#failed tr[data-group]").filter(has_text=FAILING_QUEUE)
    group.wait_for(timeout=30_000)
    retry = group.get_by_role("button", name=re.compile(f"^Retry .*failed messages of {FAILING_QUEUE}"))
    retry.click()
    check_dialog(page, frame, f"Retry {FAILING} messages?")
    page.keyboard.press("Escape")
    frame.locator("#confirm").wait_for(state="hidden", timeout=10_000)
    with open_transport(f"sqlite:///{queue_file}") as transport:
        kept = transport.queue("error").count()
    expect(kept == FAILING, f"the error queue holds {kept} after Escape closed the confirmation")
    retry.click()
    check_dialog(page, frame, f"Retry {FAILING} messages?")
    frame.locator("#confirm-yes").click()
    outcome = frame.locator("#outcome")
    wait_page(
        page,
        "the retry's outcome",
        lambda: outcome.inner_text() == f"Retried {FAILING} messages." or outcome.inner_text(),
        30,
        reload_every=1000,
    )
    frame.locator("#no-failed").wait_for(timeout=30_000)
    depth = queue_depth(frame, FAILING_QUEUE)
    expect(depth == str(FAILING), f"after the retry the page shows {FAILING_QUEUE} with {depth!r}")
    with open_transport(f"sqlite:///{queue_file}") as transport:
        from airflow_provider_sqlqueue.transport.browse import browse

        payments = browse(transport.queue(FAILING_QUEUE), 100)
        back = {m.id: m.headers.get("NServiceBus.MessageId") for m in payments}
        expect(back == failed, f"{FAILING_QUEUE} holds {back}, the error queue held {failed}")
        expect(transport.queue("error").count() == 0, "the error queue is not empty after the retry")
    page.screenshot(path=str(images / "airflow-ui-queues-retried.png"))
    log(f"retried after a confirmation: {outcome.inner_text()!r}; {FAILING_QUEUE} holds them, Ids kept")
    check_depth_history(page, stack, queue_file, images)


HOME_SECTION = '[data-testid="sqlqueue-home"]'  # home.js's section on Airflow's Home


def open_home(page: Any, stack: AirflowStack) -> dict[str, Any]:
    """Airflow's Home in ``page``, and what its SQL Queue section read from /sqlqueue/api/home."""
    with page.expect_response(lambda answer: urlsplit(answer.url).path == "/sqlqueue/api/home") as answered:
        page.goto(f"{stack.base_url}/", wait_until="domcontentloaded")
    answer = answered.value
    expect(answer.ok, f"Home's /sqlqueue/api/home answered {answer.status}: {answer.text()[:200]}")
    return answer.json()


def check_home(page: Any, stack: AirflowStack, images: Path) -> None:
    """Airflow's Home shows the connection's failed messages (home.js, a react_apps entry) in red, and its
    link opens the connection's Queues page."""
    home = page.context.new_page()
    try:
        counts = open_home(home, stack)
        section = home.locator(HOME_SECTION)
        section.wait_for(timeout=30_000)
        total = home.locator("#sqlqueue-home-failed")
        shown = total.inner_text()
        expect(
            shown == f"{FAILING} failed messages" and counts["failed"] == FAILING,
            f"Home shows {shown!r} (/api/home: {counts['failed']}), not {FAILING} failed messages",
        )
        colour = "element => getComputedStyle(element).color"
        red, text = total.evaluate(colour), section.locator("h2").evaluate(colour)
        expect(red != text, f"Home's failed count is coloured {red}, as its heading")
        link = section.get_by_role("link", name=f"Queues page of {CONN_ID}")
        expect(link.count() == 1, f"Home has {link.count()} links to the Queues page of {CONN_ID}")
        home.screenshot(path=str(images / "airflow-ui-home.png"))
        for mode in ("dark", "light"):
            home.evaluate("(mode) => localStorage.setItem('theme', mode)", mode)
            open_home(home, stack)
            home.locator(f"{HOME_SECTION} #sqlqueue-home-failed").wait_for(timeout=30_000)
            found = home.evaluate(LAYOUT_PROBE, HOME_SECTION)
            expect(
                not found["low"] and found["checked"] >= 3,
                f"Home's panel, {mode}: contrast under 4.5:1: {found['low']}",
            )
            expect(
                not found["unnamed"] and not found["unspoken"],
                f"Home's panel, {mode}: {found['unnamed']} {found['unspoken']}",
            )
            log(f"Home's panel, {mode}: contrast >= {found['lowest']}:1 over {found['checked']} texts")
            if mode == "dark":
                home.screenshot(path=str(images / "airflow-ui-home-dark.png"))
        link = home.locator(HOME_SECTION).get_by_role("link", name=f"Queues page of {CONN_ID}")
        link.click()
        home.wait_for_url(re.compile(rf"{QUEUES_PAGE}\?conn_id={CONN_ID}$"), timeout=30_000)
        home.locator("#summary-failed").wait_for(timeout=30_000)
        log(f"Home shows {total_text(counts)} for {CONN_ID}; its link opened {home.url}")
    finally:
        home.close()


def total_text(counts: dict[str, Any]) -> str:
    return f"{counts['failed']} failed messages in {len(counts['connections'])} connection(s)"


DRAIN_STEPS = 3  # receives of DRAIN_BATCH while the page refreshes itself
DRAIN_BATCH = 11


def check_depth_history(page: Any, stack: AirflowStack, queue_file: Path, images: Path) -> None:
    """With its auto-refresh switched on, the page follows QUEUE while it is filled and drained in steps;
    its chart and /api/queues' history show the depth falling to 0."""
    from airflow_provider_sqlqueue.transport import open_transport

    frame = page.frame_locator("iframe")
    with open_transport(f"sqlite:///{queue_file}") as transport:
        queue = transport.queue(QUEUE)
        full = DRAIN_STEPS * DRAIN_BATCH
        queue.send_batch(f"order {n}" for n in range(full - queue.count()))
    toggle = frame.locator("#auto-refresh")
    expect(not toggle.is_checked(), "the auto-refresh is on although this browser switched it off")
    toggle.check()
    expected = [full - step * DRAIN_BATCH for step in range(DRAIN_STEPS + 1)]
    for depth in expected:
        wait_page(
            page,
            f"the page to refresh itself and show {QUEUE} at {depth}",
            lambda d=depth: queue_depth(frame, QUEUE) == str(d) or queue_depth(frame, QUEUE),
            30,
            reload_every=1000,
        )
        if depth:
            page.wait_for_timeout(1100)  # samples closer than a second are kept as one
            with (
                open_transport(f"sqlite:///{queue_file}") as transport,
                transport.queue(QUEUE).receive(DRAIN_BATCH) as batch,
            ):
                expect(len(batch.messages) == DRAIN_BATCH, f"received {len(batch.messages)}")
    frame.locator("#auto-refresh").uncheck()
    history = page.request.get(f"{stack.base_url}/sqlqueue/api/queues?conn_id={CONN_ID}").json()["history"]
    seen = [sample["messages"] for sample in history[QUEUE]]
    steps = [depth for n, depth in enumerate(seen) if n == 0 or depth != seen[n - 1]]
    expect(steps[-len(expected) :] == expected, f"the history of {QUEUE} reads {seen}, not ending {expected}")
    chart = frame.locator(f'figure.chart[data-queue="{QUEUE}"]')
    expect(
        chart.count() == 1 and "→ 0 messages" in chart.inner_text(),
        f"the chart reads {chart.all_inner_texts()}",
    )
    expect(
        frame.locator("#history-note").get_attribute("data-source") == "memory",
        "the page says its history is the table's although this database has none",
    )
    chart.scroll_into_view_if_needed()
    page.screenshot(path=str(images / "airflow-ui-queues-history-page.png"))
    log(f"depth history of {QUEUE} from the page's reads: {steps} (auto-refresh every 3 s), chart drawn")
    check_stored_depth_history(page, stack, CONN_ID, {"url": f"sqlite:///{queue_file}"}, images)


def check_stored_depth_history(
    page: Any, stack: AirflowStack, conn_id: str, database: dict[str, Any], images: Path | None
) -> None:
    """With ``sqlqueue_depth_samples`` created beside the queues of ``conn_id`` (``database``: its
    ``open_transport`` arguments), the page draws the stored history instead of its own: QUEUE filled and
    drained in steps, each step's count sampled by the product's DepthSampler. Its clock is put a minute
    apart per step (one sample a queue a minute would otherwise make this check wait a minute a step), as a
    pump's peeks a minute apart would write them. The chart's screenshot goes to ``images``, if given."""
    from airflow_provider_sqlqueue.transport import open_transport
    from airflow_provider_sqlqueue.transport.depth_samples import (
        DepthSampler,
        DepthSampleTable,
        depth_samples_address,
    )

    with open_transport(**database) as transport:
        queue = transport.queue(QUEUE)
        queue.create()
        shown = str(queue.address)  # as the page names it: with its schema where the connection has one
        table = DepthSampleTable(transport, depth_samples_address(transport, queue.address))
        expect(table.create(), f"{table.address} existed before this check created it")
        full = DRAIN_STEPS * DRAIN_BATCH
        queue.send_batch(f"order {n}" for n in range(full - queue.count()))
        start = time.time() - (DRAIN_STEPS + 1) * 60
        for step in range(DRAIN_STEPS + 1):
            sampler = DepthSampler(transport, clock=lambda at=start + step * 60: at)
            expect(sampler.sample(queue.address, queue.count(), exact=True) is not None, "no sample offered")
            if step < DRAIN_STEPS:
                with queue.receive(DRAIN_BATCH) as batch:
                    expect(len(batch.messages) == DRAIN_BATCH, f"received {len(batch.messages)}")
    expected = [full - step * DRAIN_BATCH for step in range(DRAIN_STEPS + 1)]
    answer = page.request.get(f"{stack.base_url}/sqlqueue/api/queues?conn_id={conn_id}").json()
    seen = [sample["messages"] for sample in answer["history"][shown]]
    expect(answer["history_source"] == "table", f"the page's history source is {answer['history_source']!r}")
    expect(seen[: len(expected)] == expected, f"the stored history of {shown} reads {seen}, not {expected}")
    page.reload(wait_until="domcontentloaded")
    frame = page.frame_locator("iframe")
    frame.locator("#conn_id").select_option(conn_id)
    note = frame.locator("#history-note")
    chart = frame.locator(f'figure.chart[data-queue="{shown}"]')
    wait_page(
        page,
        f"{conn_id}'s page to draw {shown}'s stored history",
        lambda: (
            (
                note.get_attribute("data-source", timeout=2000) == "table"
                and chart.count() == 1
                and f"{full} → 0 messages" in chart.inner_text().replace(",", "")
            )
            or f"history note {note.all_inner_texts()}, chart {chart.all_inner_texts()}"
        ),
        30,
        1000,
    )
    if images is not None:
        wait_page(  # the frame may still be swapping in the page the connection's pick loaded
            page,
            "the chart to scroll into view",
            lambda: chart.scroll_into_view_if_needed(timeout=2000) is None,
            30,
            1000,
        )
        page.screenshot(path=str(images / "airflow-ui-queues-history.png"))
    log(f"{conn_id}: stored depth history of {shown} in {table.address}: {seen}, chart drawn")


POSTGRES_ENV = "SQLQUEUE_UI_CHECK_POSTGRES"  # JSON: url, schema, connection (never on a command line)
PG_CONN_ID = "sqlqueue_pg"
PG_FAILING = 3


def check_postgres(page: Any, stack: AirflowStack, postgres: dict[str, Any]) -> None:
    """The same page on PostgreSQL (when the pytest test passes a database in SQLQUEUE_UI_CHECK_POSTGRES):
    its summary counts the failed messages exactly, the group's page has its title and total, and its
    Retry, confirmed, moves them back; at 390 px it fits, in both modes."""
    from airflow_provider_sqlqueue.transport import open_transport

    stack.api("POST", "/api/v2/connections", {"connection_id": PG_CONN_ID, **postgres["connection"]})
    database = {"url": postgres["url"], "default_schema": postgres.get("schema")}
    with open_transport(**database) as transport:
        transport.queue("error").create()
    failed = fail_messages(None, PG_FAILING, **database)
    expect(len(failed) == PG_FAILING, f"PostgreSQL's error queue holds {len(failed)}, not {PG_FAILING}")
    frame = page.frame_locator("iframe")
    summary = frame.locator("#summary-failed .value")
    page.set_viewport_size(PHONE)
    for mode in ("dark", "light"):
        set_airflow_mode(page, stack, mode)
        frame.locator("#conn_id").select_option(PG_CONN_ID)
        wait_page(
            page, "PostgreSQL's summary", lambda: summary.inner_text().strip() == str(PG_FAILING), 30, 1000
        )
        probe_layout(page, "PostgreSQL's queues", mode)
        frame.locator("#failed tr[data-group] a.group-title").first.click()
        frame.locator("#messages").wait_for(timeout=30_000)
        probe_layout(page, "PostgreSQL's group", mode)
    page.set_viewport_size(VIEWPORT)
    title, total = frame.locator("#title").inner_text(), frame.locator("#total").inner_text()
    expect(
        FAILING_QUEUE in title and "ConnectionError" in title and total == str(PG_FAILING),
        f"PostgreSQL's group page is titled {title!r} with total {total!r}",
    )
    frame.locator("#retry-group").click()
    check_dialog(page, frame, f"Retry {PG_FAILING} messages?")
    frame.locator("#confirm-yes").click()
    frame.locator("#summary-failed").wait_for(timeout=30_000)
    said = frame.locator("#outcome").inner_text()
    expect(said == f"Retried {PG_FAILING} messages.", f"PostgreSQL's retry says {said!r}")
    with open_transport(**database) as transport:
        back = transport.queue(FAILING_QUEUE).count()
        left = transport.queue("error").count()
    expect((back, left) == (PG_FAILING, 0), f"after the retry {FAILING_QUEUE} holds {back}, error {left}")
    log(f"PostgreSQL: {PG_FAILING} failed in the summary, group {title!r}, fits 390 px; {said!r}")
    check_stored_depth_history(page, stack, PG_CONN_ID, database, None)
    check_postgres_deletes_and_archive(page, database)


def check_postgres_deletes_and_archive(page: Any, database: dict[str, Any]) -> None:
    """ServicePulse's workflow on PostgreSQL: one failed message deleted from its own page, the rest of its
    group from the Queues page, each after a confirmation that says how many; the archive lists them and
    restores one into the error queue. Every step is checked in the database too."""
    from airflow_provider_sqlqueue.transport import open_transport
    from airflow_provider_sqlqueue.transport.archive import ErrorArchive
    from airflow_provider_sqlqueue.transport.browse import browse

    with open_transport(**database) as transport:
        archive = ErrorArchive.of(transport.queue("error"))
        archived_before = archive.count() if archive.exists() else 0  # the first delete creates it
    failed = len(fail_messages(None, 0, **database))  # the messages the retry put back fail again
    expect(failed == PG_FAILING, f"PostgreSQL's error queue holds {failed}, not {PG_FAILING}")
    frame = page.frame_locator("iframe")
    page.reload(wait_until="domcontentloaded")
    frame.locator("#conn_id").select_option(PG_CONN_ID)
    group = frame.locator("#failed tr[data-group]").first
    wait_page(page, "PostgreSQL's failed group", lambda: group.count() == 1 or "no group yet", 30, 1000)
    group.locator("a.messages").click()
    rows = frame.locator("#messages tr[data-id]")
    wait_page(page, "the group's messages", lambda: rows.count() == failed or str(rows.count()), 30, 1000)
    delete_first_message(page, frame)
    frame.locator("#back").click()
    group.wait_for(timeout=30_000)
    confirm_and_click(page, frame, group.locator("button.delete"), f"Delete {failed - 1} messages?")
    frame.locator("#no-failed").wait_for(timeout=30_000)
    with open_transport(**database) as transport:
        error = transport.queue("error")
        left, archived = error.count(), ErrorArchive.of(error).count()
    expect(
        (left, archived) == (0, archived_before + failed),
        f"PostgreSQL's error queue holds {left}, its archive {archived} after the deletes",
    )
    frame.locator("#archive-link a").click()
    listed = frame.locator("#archived tr[data-id]")
    listed.first.wait_for(timeout=30_000)
    expect(listed.count() == archived, f"the archive page lists {listed.count()}, the table holds {archived}")
    message_id = listed.first.get_attribute("data-id")
    listed.first.get_by_role("button", name=re.compile("^Restore archived message")).click()
    confirm(page, frame, "Restore 1 message?", "Restored 1 message")
    with open_transport(**database) as transport:
        error = transport.queue("error")
        back = [str(message.id) for message in browse(error, 10)]
        kept = ErrorArchive.of(error).count()
    expect(
        back == [message_id] and kept == archived - 1,
        f"after restoring {message_id} PostgreSQL's error queue holds {back}, its archive {kept}",
    )
    log(
        f"PostgreSQL: deleted 1 of {failed} from its page and {failed - 1} from the group, each "
        f"confirmed; the archive listed {archived} and restored {message_id}"
    )


def check_dialog(page: Any, frame: Any, title: str) -> None:
    """The page's confirmation: says how many, sits on a backdrop, keeps Tab inside; Escape closes it."""
    frame.locator("#confirm").wait_for(state="visible", timeout=10_000)
    shown = frame.locator("#confirm-title").inner_text()
    expect(shown == title, f"the confirmation asks {shown!r}, not {title!r}")
    for _ in range(3):
        page.keyboard.press("Tab")
    inside = frame.locator("#confirm").evaluate("(b) => b.contains(document.activeElement)")
    backdrop = frame.locator("#confirm").evaluate(
        "(b) => { const r = b.getBoundingClientRect();"
        " return r.width >= innerWidth && r.height >= innerHeight"
        " && getComputedStyle(b).backgroundColor !== 'rgba(0, 0, 0, 0)'; }"
    )
    expect(inside and backdrop, f"the dialog keeps focus inside: {inside}; has a backdrop: {backdrop}")


def check_message_view(page: Any, frame: Any, failed: dict[str, str | None], images: Path) -> None:
    """From the failed group on the Queues page: its messages, then one message's headers, body and stack
    trace, all in the UI's frame."""
    frame.locator("#failed tr[data-group]").filter(has_text=FAILING_QUEUE).locator("a.messages").click()
    rows = frame.locator("#messages tr[data-id]")
    wait_page(page, "the group's messages", lambda: rows.count() == FAILING or rows.count(), 30, 1000)
    listed = {rows.nth(i).get_attribute("data-id") for i in range(rows.count())}
    expect(listed == set(failed), f"the group view lists {listed}, the error queue holds {set(failed)}")
    title, total = frame.locator("#title").inner_text(), frame.locator("#total").inner_text()
    expect(
        FAILING_QUEUE in title and "ConnectionError" in title and total == str(FAILING),
        f"the group view is titled {title!r} with total {total!r}",
    )
    expect(frame.locator("#retry-group").is_visible(), "the group view has no Retry button")
    first = sorted(listed)[0]
    frame.locator(f'#messages tr[data-id="{first}"] a.message').click()
    frame.locator("#stack-trace").wait_for(timeout=30_000)
    trace = frame.locator("#stack-trace").inner_text()
    body = frame.locator("#body").inner_text()
    headers = frame.locator("#headers").inner_text()
    expect(
        "ConnectionError: payment service unreachable" in trace,
        f"the message view's stack trace reads {trace[:300]!r}",
    )
    expect(body.startswith("payment "), f"the message view's body reads {body[:100]!r}")
    expect(
        "NServiceBus.FailedQ" in headers and str(failed[first]) in headers,
        f"the message view's headers lack FailedQ or the MessageId {failed[first]}: {headers[:300]!r}",
    )
    page.screenshot(path=str(images / "airflow-ui-message.png"))
    log(f"screenshot airflow-ui-message.png (message {first}: headers, body {body!r}, stack trace)")


def other_type_connection(stack: AirflowStack, port: int) -> None:
    """A postgres-type connection with a superuser's login, pointing at a port this check listens on."""
    stack.api(
        "POST",
        "/api/v2/connections",
        {
            "connection_id": OTHER_TYPE_CONN_ID,
            "conn_type": "postgres",
            "host": "127.0.0.1",
            "port": port,
            "login": "postgres",
            "password": "superuser-secret",
            "schema": "hr",
        },
    )


def same_answer(page: Any, stack: AirflowStack, conn_id: str, who: str) -> tuple[int, str]:
    """The page API's answers for ``conn_id`` and for an unknown id, which must be the same (404)."""
    answers = []
    for asked in (conn_id, "no_such_connection_id"):
        response = page.request.get(f"{stack.base_url}/sqlqueue/api/queues?conn_id={asked}")
        answers.append((response.status, response.text()))
    expect(
        answers[0] == answers[1] and answers[0][0] == 404,
        f"{who}: {conn_id} is answered {answers[0]}, an unknown id {answers[1]}",
    )
    return answers[0]


def check_other_type(page: Any, stack: AirflowStack) -> None:
    """As admin: a postgres-type connection is not served, and the API server never connects to it."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(5)
        listener.setblocking(False)
        other_type_connection(stack, listener.getsockname()[1])
        status, body = same_answer(page, stack, OTHER_TYPE_CONN_ID, "admin")
        response = page.goto(
            f"{stack.base_url}/sqlqueue/queues?conn_id={OTHER_TYPE_CONN_ID}", wait_until="domcontentloaded"
        )
        shown = page.locator("#error").inner_text()
        expect(
            response is not None and response.status == 404 and "that you may read" in shown,
            f"the page for {OTHER_TYPE_CONN_ID} answered {response and response.status}: {shown!r}",
        )
        expect(page.locator("#queues").count() == 0, f"the page shows queues of {OTHER_TYPE_CONN_ID}")
        options = page.locator("#conn_id option").all_inner_texts()
        expect(CONN_ID in options, f"the admin's connection list is {options}")
        try:
            listener.accept()
            raise CheckFailed(f"the API server connected to {OTHER_TYPE_CONN_ID}'s port")
        except BlockingIOError:
            pass
    log(
        f"admin: {OTHER_TYPE_CONN_ID} (postgres) answered {status} {body} as an unknown id; nothing connected"
    )
    response = page.goto(f"{stack.base_url}/sqlqueue/failed?conn_id={CONN_ID}&group=5f1c", wait_until="load")
    said = page.locator("#error").inner_text()
    expect(
        response is not None and response.status == 422 and "12 hexadecimal digits" in said,
        f"a shortened group id answered {response and response.status}: {page.content()[:300]!r}",
    )
    log(f"a shortened group id: {said!r}")


def check_viewer(context: Any, stack: AirflowStack, queue_file: Path, images: Path) -> None:
    from airflow_provider_sqlqueue.transport import open_transport
    from airflow_provider_sqlqueue.transport.failed import failed_rows

    expect(len(fail_messages(queue_file, 0)) == FAILING, "the retried messages did not fail again")
    try:
        stack.api("GET", f"/api/v2/connections/{CONN_ID}", user="viewer")
        raise CheckFailed(f"the viewer may read /api/v2/connections/{CONN_ID}")
    except urllib.error.HTTPError as error:
        expect(error.code == 403, f"/api/v2/connections/{CONN_ID} answered the viewer {error.code}")
    context.clear_cookies()  # the admin's session ends here
    page = context.new_page()
    log_in(page, stack, "viewer")
    counts = open_home(page, stack)
    page.wait_for_timeout(500)  # the component renders what /api/home answered
    expect(
        counts["connections"] == [] and page.locator(HOME_SECTION).count() == 0,
        f"the viewer's Home shows SQL Queue counts: {counts}",
    )
    log("the viewer's Home shows no SQL Queue section (/api/home lists no connection for a viewer)")
    page.goto(f"{stack.base_url}/plugin/sqlqueue-queues", wait_until="domcontentloaded")
    frame = page.frame_locator("iframe")
    frame.locator("h1").wait_for(timeout=30_000)
    text = frame.locator("body").inner_text()
    expect(
        "that you may read" in text and CONN_ID not in text and frame.locator("#failed").count() == 0,
        f"the viewer's Queues page reads {text[:300]!r}",
    )
    status, body = same_answer(page, stack, CONN_ID, "viewer")
    with open_transport(f"sqlite:///{queue_file}") as transport:
        group = next(failed_rows(transport.queue("error"))).group_key
    for action in ("retry", "delete"):
        answer = page.request.post(
            f"{stack.base_url}/sqlqueue/api/{action}",
            data=json.dumps({"conn_id": CONN_ID, "group": group}),
            headers={"Content-Type": "application/json", "Origin": stack.base_url},
        )
        expect(
            (answer.status, answer.text()) == (status, body),
            f"the viewer's {action} was answered {answer.status}: {answer.text()[:200]}",
        )
    with open_transport(f"sqlite:///{queue_file}") as transport:
        left = transport.queue("error").count()
    expect(left == FAILING, f"the error queue holds {left} after the viewer's refused writes, not {FAILING}")
    page.screenshot(path=str(images / "airflow-ui-queues-viewer.png"))
    log(f"screenshot airflow-ui-queues-viewer.png (viewer: served no connection, {CONN_ID} as unknown)")
    page.close()


def confirm(page: Any, frame: Any, title: str, outcome_starts: str) -> str:
    """The open confirmation asks ``title``; confirmed, the page's outcome starts ``outcome_starts``."""
    check_dialog(page, frame, title)
    frame.locator("#confirm-yes").click()
    outcome = frame.locator("#outcome")
    wait_page(
        page,
        f"the outcome {outcome_starts!r}",
        lambda: outcome.inner_text().startswith(outcome_starts) or outcome.inner_text(),
        30,
        1000,
    )
    return outcome.inner_text()


def delete_first_message(page: Any, frame: Any) -> None:
    """From a group's page: open its first message, delete it after the confirmation, see it archived."""
    frame.locator("#messages tr[data-id] a.message").first.click()
    confirm_and_click(page, frame, frame.locator("#delete-message"), "Delete 1 message?")
    outcome = frame.locator("#outcome")
    wait_page(
        page,
        "the message's delete",
        lambda: outcome.inner_text().startswith("Moved 1 message to the archive") or outcome.inner_text(),
        30,
        1000,
    )


def confirm_and_click(page: Any, frame: Any, button: Any, expected: str) -> None:
    """Click a Delete button, check the page's confirmation says ``expected`` (how many) and confirm it.
    (Airflow's frame is sandboxed without ``allow-modals``: the page asks itself, not with ``confirm()``.)"""
    button.click()
    check_dialog(page, frame, expected)
    text = frame.locator("#confirm-text").inner_text()
    expect("archive" in text, f"the confirmation reads {text!r}")
    frame.locator("#confirm-yes").click()


def check_op(context: Any, stack: AirflowStack, queue_file: Path, images: Path) -> None:
    from airflow_provider_sqlqueue.transport import open_transport
    from airflow_provider_sqlqueue.transport.archive import ErrorArchive

    context.clear_cookies()  # the viewer's session ends here
    page = context.new_page()
    log_in(page, stack, "op")
    check_phones_and_modes(page, stack, images)
    page.goto(f"{stack.base_url}/plugin/sqlqueue-queues", wait_until="domcontentloaded")
    frame = page.frame_locator("iframe")
    frame.locator("#failed").wait_for(timeout=30_000)
    frame.locator("#failed tr[data-group] a.messages").first.click()
    delete_first_message(page, frame)
    rows = frame.locator("#messages tr[data-id]")
    expect(rows.count() == FAILING - 1, f"the group lists {rows.count()} after one delete")
    frame.locator("#back").click()
    group = frame.locator("#failed tr[data-group]").first
    group.wait_for(timeout=30_000)
    group.locator("button.delete").click()  # asked, then cancelled: nothing moves
    frame.locator("#confirm-no").click()
    frame.locator("#confirm").wait_for(state="hidden", timeout=10_000)
    with open_transport(f"sqlite:///{queue_file}") as transport:
        kept = transport.queue("error").count()
    expect(kept == FAILING - 1, f"error holds {kept} after a cancelled delete, not {FAILING - 1}")
    confirm_and_click(page, frame, group.locator("button.delete"), f"Delete {FAILING - 1} messages?")
    frame.locator("#no-failed").wait_for(timeout=30_000)
    expect(
        frame.locator("#outcome").inner_text().startswith(f"Moved {FAILING - 1} messages to the archive"),
        f"the group's delete says {frame.locator('#outcome').inner_text()!r}",
    )
    with open_transport(f"sqlite:///{queue_file}") as transport:
        error = transport.queue("error")
        left, archived = error.count(), ErrorArchive.of(error).count()
    expect((left, archived) == (0, FAILING), f"error holds {left}, its archive {archived} after the deletes")
    page.screenshot(path=str(images / "airflow-ui-queues-deleted.png"))
    log(f"screenshot airflow-ui-queues-deleted.png (op: 1, then {FAILING - 1}; {archived} archived)")

    entries = {}
    for event in ("sqlqueue.retry_failed", "sqlqueue.delete_failed"):
        found = stack.api("GET", f"/api/v2/eventLogs?event={event}&order_by=id")["event_logs"]
        entries[event] = [(e["owner"], json.loads(e["extra"] or "{}")) for e in found]
    retried = [
        extra.get("done")
        for owner, extra in entries["sqlqueue.retry_failed"]
        if owner == "admin" and extra.get("conn_id") == CONN_ID
    ]
    deleted = [
        (owner, extra.get("id") is not None, extra.get("done"))
        for owner, extra in entries["sqlqueue.delete_failed"]
        if extra.get("conn_id") == CONN_ID  # the PostgreSQL pass's deletes are the admin's
    ]
    expect(sum(retried) == FAILING, f"the audit log's retries by admin: {entries['sqlqueue.retry_failed']}")
    expect(
        deleted == [("op", True, 1), ("op", False, FAILING - 1)],
        f"the audit log's deletes: {entries['sqlqueue.delete_failed']}",
    )
    log(f"audit log: admin's retry ({sum(retried)} messages), op's deletes {deleted}")
    check_stale_tab(context, page, stack, queue_file)
    check_archive(page, stack, queue_file, images)
    check_session_end(context, page, stack)
    page.close()


# ---- phones, Airflow's light and dark modes, a stale tab, an ended session ------------------------------
PHONE = {"width": 390, "height": 844}
# In the page's frame: sideways scroll, targets under 24 px or off-screen, and text under 4.5:1 contrast
# against the background it is drawn on (alpha layers composed), as WCAG 2.x computes it.
LAYOUT_PROBE = r"""(scope) => {
  const doc = document.documentElement;
  const root = scope ? document.querySelector(scope) : document.body;
  const canvas = document.createElement("canvas").getContext("2d", {willReadFrequently: true});
  const rgba = (text) => {
    canvas.clearRect(0, 0, 1, 1);
    canvas.fillStyle = text;
    canvas.fillRect(0, 0, 1, 1);
    const [r, g, b, a] = canvas.getImageData(0, 0, 1, 1).data;
    return [r, g, b, a / 255];
  };
  const lum = (c) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  const background = (el) => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = rgba(getComputedStyle(e).backgroundColor);
      if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
    }
    let base = [255, 255, 255];
    for (let i = layers.length - 1; i >= 0; i--) {
      const c = layers[i];
      base = [0, 1, 2].map((k) => c[k] * c[3] + base[k] * (1 - c[3]));
    }
    return base;
  };
  const shown = (e) => {
    const r = e.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && !e.closest("[hidden]");
  };
  const low = [];
  let checked = 0, lowest = 99;
  for (const el of root.querySelectorAll("*")) {
    if (["SCRIPT", "STYLE"].includes(el.tagName) || !shown(el) || el.closest("button:disabled")) continue;
    if (![...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
    const fg = rgba(getComputedStyle(el).color), bg = background(el);
    const a = lum(fg), b = lum(bg);
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    checked += 1;
    lowest = Math.min(lowest, ratio);
    const text = el.textContent.trim().slice(0, 30);
    if (ratio < 4.5) low.push(`${el.tagName}.${el.className} ${text}: ${ratio.toFixed(2)}`);
  }
  const targets = [...root.querySelectorAll(
    "button, select, label.check, .pagination a, nav.back a, td a, .tile a")].filter(shown);
  const box = (e) => e.getBoundingClientRect();
  const name = (e) => e.getAttribute("aria-label") || e.textContent.trim().slice(0, 30) || e.id;
  // Accessible names: every control named, no two buttons (or links to different places) named alike, and
  // each one's visible words inside its name (WCAG 2.5.3), so a voice user can say what they see.
  const controls = [...root.querySelectorAll("button, a[href]")].filter(shown);
  const words = (text) => text.toLowerCase().replace(/[^\p{L}\p{N}]+/gu, " ").trim();
  const accessible = (e) => (e.getAttribute("aria-label") || e.innerText || "").trim();
  const seen = new Map();
  const duplicated = [];
  for (const e of controls) {
    const key = `${e.tagName} ${accessible(e)}`;
    const where = e.tagName === "A" ? e.getAttribute("href") : e.id || e.dataset.group || e.dataset.action;
    if (seen.has(key) && seen.get(key) !== where) duplicated.push(key);
    seen.set(key, where);
  }
  return {
    unnamed: controls.filter((e) => !accessible(e)).map((e) => e.outerHTML.slice(0, 80)),
    duplicated,
    unspoken: controls.filter((e) => !words(accessible(e)).includes(words(e.innerText || "")))
      .map((e) => `${(e.innerText || "").trim()} / ${accessible(e)}`),
    theme: doc.dataset.theme,
    background: getComputedStyle(document.body).backgroundColor,
    sideways: doc.scrollWidth - doc.clientWidth,
    width: doc.clientWidth,
    checked, lowest: Math.round(lowest * 100) / 100, low,
    targets: targets.length,
    small: targets.filter((e) => box(e).width < 24 || box(e).height < 24).map(name),
    offscreen: targets.filter((e) => box(e).right > doc.clientWidth + 1 || box(e).left < 0).map(name),
  };
}"""


def page_frame(page: Any) -> Any:
    """The Queues page's frame (a Frame, for evaluate) inside Airflow's UI, once its document has loaded."""

    def loaded() -> Any:
        for frame in page.frames:
            if urlsplit(frame.url).path.startswith("/sqlqueue/") and not frame.is_detached():
                try:
                    if frame.evaluate("() => document.readyState === 'complete'"):
                        return frame
                except Exception:  # navigating
                    continue
        return None

    return wait_for("the Queues page's frame", loaded, 30)


def probe_layout(page: Any, view: str, mode: str) -> dict[str, Any]:
    page.wait_for_timeout(300)  # the frame's theme script follows the UI's class change
    frame = page_frame(page)
    found = frame.evaluate(LAYOUT_PROBE)
    where = f"{view} at {page.viewport_size['width']} px, {mode}"
    if found["theme"] != mode:
        head = frame.evaluate("() => document.documentElement.outerHTML.slice(0, 400)")
        raise CheckFailed(
            f"{where}: the page ({frame.url}) is in {found['theme']!r} mode, Airflow in {mode!r}: {head}"
        )
    expect(found["sideways"] <= 0, f"{where}: scrolls sideways by {found['sideways']} px")
    expect(not found["small"], f"{where}: targets under 24 px: {found['small']}")
    expect(not found["offscreen"], f"{where}: targets off-screen: {found['offscreen']}")
    expect(not found["low"] and found["checked"] > 5, f"{where}: contrast under 4.5:1: {found['low']}")
    expect(not found["unnamed"], f"{where}: controls without a name: {found['unnamed']}")
    expect(
        not found["duplicated"],
        f"{where}: controls named alike that do different things: {found['duplicated']}",
    )
    expect(not found["unspoken"], f"{where}: visible words missing from the name: {found['unspoken']}")
    log(
        f"{where}: no sideways scroll, {found['targets']} targets >= 24 px, contrast >= {found['lowest']}:1, "
        "every control named uniquely with its visible words"
    )
    return found


def set_airflow_mode(page: Any, stack: AirflowStack, mode: str) -> None:
    """Airflow's own light/dark setting (its UI keeps it in localStorage ``theme``), then the Queues page
    afresh."""
    page.evaluate("(mode) => localStorage.setItem('theme', mode)", mode)
    page.goto(f"{stack.base_url}/plugin/sqlqueue-queues", wait_until="domcontentloaded")
    wait_for(
        f"Airflow's UI in {mode} mode",
        lambda: page.evaluate("(m) => document.documentElement.classList.contains(m)", mode),
        30,
    )


def check_phones_and_modes(page: Any, stack: AirflowStack, images: Path) -> None:
    """As op (who sees the actions): the Queues page, a group and a message at 390x844 and 1440 wide, in
    Airflow's light and dark modes: no sideways scroll, targets of 24 px or more on screen, contrast of
    4.5:1 or more; the confirmation fits the phone."""
    results = []
    for size, label in ((PHONE, "phone"), (VIEWPORT, "desktop")):
        page.set_viewport_size(size)
        for mode in ("light", "dark"):
            set_airflow_mode(page, stack, mode)
            frame = page.frame_locator("iframe")
            frame.locator("#failed").wait_for(timeout=30_000)
            results.append(("queues", label, mode, probe_layout(page, "queues", mode)))
            if label == "phone":
                page.screenshot(path=str(images / f"airflow-ui-queues-phone-{mode}.png"))
            elif mode == "dark":
                page.screenshot(path=str(images / "airflow-ui-queues-dark.png"))
            frame.locator("#failed tr[data-group] a.messages").first.click()
            frame.locator("#messages").wait_for(timeout=30_000)
            results.append(("group", label, mode, probe_layout(page, "group", mode)))
            if label == "desktop" and mode == "light":
                page.screenshot(path=str(images / "airflow-ui-group.png"))
            if label == "phone" and mode == "dark":
                frame.locator("#retry-group").click()
                check_dialog(page, frame, f"Retry {FAILING} messages?")
                fits = frame.locator("#confirm .dialog").evaluate(
                    "(d) => { const r = d.getBoundingClientRect();"
                    " return r.left >= 0 && r.right <= innerWidth; }"
                )
                expect(fits, "the confirmation does not fit the phone's width")
                page.screenshot(path=str(images / "airflow-ui-confirm-phone-dark.png"))
                page.keyboard.press("Escape")
                frame.locator("#confirm").wait_for(state="hidden", timeout=10_000)
            frame.locator("#messages tr[data-id] a.message").first.click()
            frame.locator("#stack-trace").wait_for(timeout=30_000)
            results.append(("message", label, mode, probe_layout(page, "message", mode)))
    set_airflow_mode(page, stack, "light")
    page.set_viewport_size(VIEWPORT)
    log(
        "layout: "
        + "; ".join(
            f"{view} {label} {mode}: {r['width']} px wide, {r['targets']} targets >= 24 px, "
            f"lowest contrast {r['lowest']}:1 of {r['checked']} texts"
            for view, label, mode, r in results
        )
    )


def check_stale_tab(context: Any, page: Any, stack: AirflowStack, queue_file: Path) -> None:
    """Two tabs on one group: the second retries it; the first's retry of its selection says why it
    retried nothing."""
    from airflow_provider_sqlqueue.transport import open_transport

    fail_messages(queue_file, 2)
    page.goto(f"{stack.base_url}/plugin/sqlqueue-queues", wait_until="domcontentloaded")
    frame = page.frame_locator("iframe")
    frame.locator("#failed tr[data-group] a.messages").first.click()
    frame.locator("#pick-all").check()
    button = frame.locator("#retry-selected")
    expect(button.inner_text() == "Retry 2 selected", f"the selection's button reads {button.inner_text()!r}")
    other = context.new_page()
    other.goto(f"{stack.base_url}/plugin/sqlqueue-queues", wait_until="domcontentloaded")
    other_frame = other.frame_locator("iframe")
    other_frame.locator("#failed tr[data-group] button.retry").first.click()
    other_frame.locator("#confirm-yes").click()
    other_frame.locator("#no-failed").wait_for(timeout=30_000)
    other.close()
    button.click()
    said = confirm(page, frame, "Retry 2 messages?", "Retried 0 messages.")
    expect(
        "None of the 2 messages this page showed was still in the error queue" in said
        and "another tab" in said,
        f"the stale tab says {said!r}",
    )
    with open_transport(f"sqlite:///{queue_file}") as transport:
        expect(transport.queue("error").count() == 0, "the error queue is not empty after both retries")
    log(f"a stale tab's retry of its selection says: {said!r}")


def check_archive(page: Any, stack: AirflowStack, queue_file: Path, images: Path) -> None:
    """As op: the error queue's archive, opened from the Queues page, lists what the deletes moved and holds
    at both widths in both modes; restoring one message asks first and moves it back into the error queue."""
    from airflow_provider_sqlqueue.transport import open_transport
    from airflow_provider_sqlqueue.transport.archive import ErrorArchive
    from airflow_provider_sqlqueue.transport.browse import browse

    with open_transport(f"sqlite:///{queue_file}") as transport:
        archived = ErrorArchive.of(transport.queue("error")).count()
    expect(archived > 0, "the archive is empty before its check")
    frame = page.frame_locator("iframe")
    results = []
    for size, label in ((PHONE, "phone"), (VIEWPORT, "desktop")):
        page.set_viewport_size(size)
        for mode in ("light", "dark"):
            set_airflow_mode(page, stack, mode)
            frame.locator("#archive-link a").click()
            frame.locator("#archived").wait_for(timeout=30_000)
            results.append(f"{label} {mode} {probe_layout(page, 'archive', mode)['lowest']}:1")
            if label == "phone" and mode == "dark":
                page.screenshot(path=str(images / "airflow-ui-archive-phone-dark.png"))
    set_airflow_mode(page, stack, "light")
    page.set_viewport_size(VIEWPORT)
    frame.locator("#archive-link a").click()
    rows = frame.locator("#archived tr[data-id]")
    rows.first.wait_for(timeout=30_000)
    expect(
        rows.count() == archived,
        f"the archive page lists {rows.count()} messages, the table holds {archived}",
    )
    message_id = rows.first.get_attribute("data-id")
    page.screenshot(path=str(images / "airflow-ui-archive.png"))
    rows.first.get_by_role("button", name=re.compile("^Restore archived message")).click()
    confirm(page, frame, "Restore 1 message?", "Restored 1 message")
    with open_transport(f"sqlite:///{queue_file}") as transport:
        error = transport.queue("error")
        back = [str(message.id) for message in browse(error, 10)]
        left = ErrorArchive.of(error).count()
    expect(
        back == [message_id] and left == archived - 1,
        f"after restoring {message_id} the error queue holds {back}, the archive {left} of {archived}",
    )
    log(
        f"archive: {archived} listed, contrast {', '.join(results)}; "
        f"restored {message_id} after a confirmation"
    )


def check_session_end(context: Any, page: Any, stack: AirflowStack) -> None:
    """An ended session sends the whole window to Airflow's login, not the frame."""
    frame = page.frame_locator("iframe")
    context.clear_cookies()
    frame.locator("#back").click()
    page.wait_for_url(re.compile(r"/auth/login"), timeout=30_000)
    expect(page.locator('input[name="username"]').count() == 1, "no login form in the window")
    log(f"an ended session: the window went to Airflow's login ({page.url.split('?')[0]})")


# ---- main --------------------------------------------------------------------------------------
def queues_only(stack: AirflowStack, queue_file: Path) -> None:
    """--queues-only: the connection through the REST API and the queues as (a) and (b) leave them."""
    from airflow_provider_sqlqueue.transport import open_transport

    stack.api(
        "POST",
        "/api/v2/connections",
        {"connection_id": CONN_ID, "conn_type": "sqlqueue", "host": str(queue_file)},
    )
    with open_transport(f"sqlite:///{queue_file}", create_missing_file=True) as transport:
        transport.queue(QUEUE).create()
        transport.queue("error").create()
    log("--queues-only: connection and queues made without the form and the sensor run")


def run_check(images: Path, home: Path, only_queues: bool = False) -> None:
    postgres = json.loads(os.environ.get(POSTGRES_ENV) or "null")
    from playwright.sync_api import sync_playwright

    images.mkdir(parents=True, exist_ok=True)
    stack = AirflowStack(home, log=log, users=USERS)
    queue_file = home / "queues.db"
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    try:
        stack.migrate()
        stack.start()
        with sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                str(home / "chromium-profile"),
                executable_path=CHROMIUM,
                headless=True,
                args=CHROMIUM_ARGS,
                viewport=VIEWPORT,
            )
            page = context.new_page()
            page.set_default_timeout(30_000)
            try:
                stack.wait_until_ready(180)
                timings["airflow up"] = time.monotonic() - t0
                log(f"Airflow is up at {stack.base_url} after {timings['airflow up']:.1f} s")
                log_in(page, stack, "admin")
                t1 = time.monotonic()
                if only_queues:
                    queues_only(stack, queue_file)
                else:
                    check_connection_form(page, stack, queue_file, images)
                timings["connection form"] = time.monotonic() - t1
                t1 = time.monotonic()
                if not only_queues:
                    check_sensor_run(page, stack, queue_file, images)
                timings["sensor run"] = time.monotonic() - t1
                t1 = time.monotonic()
                check_queues_page(page, stack, queue_file, images)
                check_other_type(page, stack)
                if postgres:
                    check_postgres(page, stack, postgres)
                check_viewer(context, stack, queue_file, images)
                check_op(context, stack, queue_file, images)
                timings["queues page"] = time.monotonic() - t1  # admin, viewer and op
            except BaseException:
                shot = home / "airflow-ui-failure.png"
                try:
                    page.screenshot(path=str(shot), full_page=True)
                    log(f"failure screenshot: {shot} (page {page.url})")
                except Exception as error:
                    log(f"no failure screenshot: {error}")
                raise
            finally:
                context.close()
    finally:
        signal.alarm(0)  # let nothing interrupt the clean-up
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        t1 = time.monotonic()
        stack.stop()
        timings["stop"] = time.monotonic() - t1
        timings["total"] = time.monotonic() - t0
        log("timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))


class Interrupted(Exception):
    pass


def _interrupt(signum: int, _frame: Any) -> None:
    reason = "the time limit (--timeout)" if signum == signal.SIGALRM else f"signal {signum}"
    raise Interrupted(f"stopped by {reason}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=Path, default=REPO / "docs" / "images", help="where screenshots go")
    parser.add_argument("--home", type=Path, help="AIRFLOW_HOME to create (default: a new temporary folder)")
    parser.add_argument("--keep-home", action="store_true", help="keep AIRFLOW_HOME after a success too")
    parser.add_argument("--timeout", type=int, default=480, help="give up after this many seconds (480)")
    parser.add_argument(
        "--queues-only", action="store_true", help="only (c) to (e): no connection form, no sensor run"
    )
    args = parser.parse_args(argv)
    if not Path(CHROMIUM).exists():
        print(f"ui-check: {CHROMIUM} is missing (apt-get install chromium)", file=sys.stderr)
        return 2
    if args.home:
        args.home.mkdir(parents=True, exist_ok=False)
        home = args.home.resolve()
    else:
        home = Path(tempfile.mkdtemp(prefix="sqlqueue-ui-check-"))
    log(f"AIRFLOW_HOME {home}")
    # SIGTERM (e.g. from timeout(1) or the pytest wrapper) and the time limit unwind through the finally
    # blocks, which stop Airflow and Chromium.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGALRM, _interrupt)
    signal.alarm(args.timeout)
    try:
        run_check(args.images.resolve(), home, args.queues_only)
    except (Exception, KeyboardInterrupt) as error:
        traceback.print_exc()
        stack_logs = ", ".join(p.name for p in sorted(home.glob("*.log")))
        print(
            f"\nui-check FAILED: {error}\n"
            f"Airflow's logs ({stack_logs}) and airflow-ui-failure.png are kept in {home}",
            file=sys.stderr,
        )
        return 1
    finally:
        signal.alarm(0)
    if args.keep_home:
        log(f"kept {home}")
    else:
        shutil.rmtree(home, ignore_errors=True)
    log("ui-check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
