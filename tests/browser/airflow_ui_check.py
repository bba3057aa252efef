"""The provider in a real Airflow UI, driven by headless Chromium (docs/airflow-ui.md).

Starts a throwaway Airflow 3 on loopback with ``dags_examples/`` (see airflow_stack.py), then, in the
browser:

(a) opens the Add Connection form, picks the ``SQL Queue`` type and checks that every label, placeholder,
    hidden field and extra field the provider declares in ``get_provider_info()`` is shown as declared,
    fills in a SQLite queue file and saves the connection as ``sqlqueue_default``;
(b) triggers ``sqlqueue_sensor_example`` from its Trigger dialog with ``min_messages`` above what its
    producer sends, waits until the run page shows the sensor ``Deferred``, sends the missing messages
    and waits until the page shows the task, the consumer and the run ``Success``;
(c) opens the provider's Queues page from the navigation (Browse → Queues), sees a queue's depth change
    after a send, sees the failed-message group a broken handler left in the error queue, opens the group
    and one of its messages (headers, body, stack trace), retries the group with one click and sees the
    messages back in their queue; as admin, is not served a ``postgres``-type connection (the answer of an
    unknown id; nothing connects to its port);
(d) logged in as a viewer (403 on ``/api/v2/connections/sqlqueue_default``), is served no connection: none
    listed, and the page's API answers for ``sqlqueue_default`` exactly as for an unknown id, retry and
    delete included;
(e) logged in as an op, deletes one message from its detail view and then the rest of the group from the
    Queues page, each after the browser's confirmation: both move to the archive beside the error queue,
    and Airflow's audit log (REST ``/api/v2/eventLogs``) holds both deletes under ``op`` and the admin's
    retry.

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


# ---- (c) the Queues page ------------------------------------------------------------------------
def log_in(page: Any, stack: AirflowStack, user: str) -> None:
    page.goto(f"{stack.base_url}/", wait_until="domcontentloaded")
    page.locator('input[name="username"]').fill(user)
    page.locator('input[name="password"]').fill(stack.passwords[user])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"^(?!.*/auth/login).*$"), timeout=30_000)
    log(f"logged in as {user} ({stack.users[user]})")


def queue_depth(frame: Any, queue: str) -> str:
    """The depth the page shows, without its estimate mark (≈): the queues here have no gaps in their
    RowVersions, so the estimate is the exact count."""
    cell = frame.locator(f'#queues tr[data-queue="{queue}"] td.depth')
    return cell.inner_text().strip().lstrip("≈ ") if cell.count() == 1 else f"(no row for {queue})"


def broken(message: Any, context: Any) -> None:
    raise ConnectionError("payment service unreachable")


def fail_messages(queue_file: Path, send: int) -> dict[str, str | None]:
    """Send ``send`` messages to FAILING_QUEUE, let a broken handler move all it holds to the error queue,
    and return the error queue's rows as {row Id: NServiceBus.MessageId}."""
    from airflow_provider_sqlqueue.transport import open_transport
    from airflow_provider_sqlqueue.transport.browse import browse
    from airflow_provider_sqlqueue.transport.pump import MessagePump

    with open_transport(f"sqlite:///{queue_file}") as transport:
        queue = transport.queue(FAILING_QUEUE)
        queue.create()
        if send:
            queue.send_batch(f"payment {n}" for n in range(send))
        MessagePump(queue, broken, transaction_mode="none", idle_delay=0.1).run(until_empty=True, timeout=60)
        expect(queue.count() == 0, f"{FAILING_QUEUE} still holds {queue.count()} message(s)")
        return {m.id: m.headers.get("NServiceBus.MessageId") for m in browse(transport.queue("error"), 100)}


def check_queues_page(page: Any, stack: AirflowStack, queue_file: Path, images: Path) -> None:
    from airflow_provider_sqlqueue.transport import open_transport

    page.get_by_role("button", name="Browse").click()
    page.get_by_role("menuitem", name="Queues").click()
    page.wait_for_url(re.compile(r"/plugin/sqlqueue-queues"), timeout=30_000)
    frame = page.frame_locator("iframe")
    frame.locator("#queues").wait_for(timeout=30_000)
    before = queue_depth(frame, QUEUE)
    expect(before == "0", f"the Queues page shows {QUEUE} with {before!r} messages after the run drained it")
    log(f"Queues page (Browse → Queues) shows {QUEUE} with {before} messages")

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

    check_message_view(page, frame, failed, images)
    frame.locator("#back").click()
    group = frame.locator("#failed tr[data-group]").filter(has_text=FAILING_QUEUE)
    group.wait_for(timeout=30_000)
    group.get_by_role("button", name=re.compile("Retry")).click()
    outcome = frame.locator("#outcome")
    wait_page(
        page,
        "the retry's outcome",
        lambda: outcome.inner_text().startswith(f"Retried {FAILING} message(s)") or outcome.inner_text(),
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
    log(f"retried with one click: {outcome.inner_text()!r}; {FAILING_QUEUE} holds them, Ids kept")


def check_message_view(page: Any, frame: Any, failed: dict[str, str | None], images: Path) -> None:
    """From the failed group on the Queues page: its messages, then one message's headers, body and stack
    trace, all in the UI's frame."""
    frame.locator("#failed tr[data-group]").filter(has_text=FAILING_QUEUE).locator("a.messages").click()
    rows = frame.locator("#messages tr[data-id]")
    wait_page(page, "the group's messages", lambda: rows.count() == FAILING or rows.count(), 30, 1000)
    listed = {rows.nth(i).get_attribute("data-id") for i in range(rows.count())}
    expect(listed == set(failed), f"the group view lists {listed}, the error queue holds {set(failed)}")
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


def confirm_and_click(page: Any, frame: Any, button: Any, expected: str) -> None:
    """Click a Delete button, check the page's confirmation mentions ``expected`` and confirm it. (Airflow's
    frame is sandboxed without ``allow-modals``: the page asks in itself, not with ``confirm()``.)"""
    button.click()
    panel = frame.locator("#confirm-delete")
    panel.wait_for(state="visible", timeout=10_000)
    text = frame.locator("#confirm-text").inner_text()
    expect(expected in text and "archive" in text, f"the confirmation reads {text!r}")
    frame.locator("#confirm-yes").click()


def check_op(context: Any, stack: AirflowStack, queue_file: Path, images: Path) -> None:
    from airflow_provider_sqlqueue.transport import open_transport
    from airflow_provider_sqlqueue.transport.archive import ErrorArchive

    context.clear_cookies()  # the viewer's session ends here
    page = context.new_page()
    log_in(page, stack, "op")
    page.goto(f"{stack.base_url}/plugin/sqlqueue-queues", wait_until="domcontentloaded")
    frame = page.frame_locator("iframe")
    frame.locator("#failed").wait_for(timeout=30_000)
    frame.locator("#failed tr[data-group] a.messages").first.click()
    frame.locator("#messages tr[data-id] a.message").first.click()
    confirm_and_click(page, frame, frame.locator("#delete-message"), "this message")
    outcome = frame.locator("#outcome")
    wait_page(
        page,
        "the message's delete",
        lambda: outcome.inner_text().startswith("Moved 1 message(s) to the archive") or outcome.inner_text(),
        30,
        1000,
    )
    rows = frame.locator("#messages tr[data-id]")
    expect(rows.count() == FAILING - 1, f"the group lists {rows.count()} after one delete")
    frame.locator("#back").click()
    group = frame.locator("#failed tr[data-group]").first
    group.wait_for(timeout=30_000)
    group.locator("button.delete").click()  # asked, then cancelled: nothing moves
    frame.locator("#confirm-no").click()
    frame.locator("#confirm-delete").wait_for(state="hidden", timeout=10_000)
    with open_transport(f"sqlite:///{queue_file}") as transport:
        kept = transport.queue("error").count()
    expect(kept == FAILING - 1, f"error holds {kept} after a cancelled delete, not {FAILING - 1}")
    confirm_and_click(page, frame, group.locator("button.delete"), f"{FAILING - 1} message(s)")
    frame.locator("#no-failed").wait_for(timeout=30_000)
    expect(
        frame.locator("#outcome").inner_text().startswith(f"Moved {FAILING - 1} message(s) to the archive"),
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
    retried = [extra.get("done") for owner, extra in entries["sqlqueue.retry_failed"] if owner == "admin"]
    deleted = [
        (owner, extra.get("id") is not None, extra.get("done"))
        for owner, extra in entries["sqlqueue.delete_failed"]
    ]
    expect(sum(retried) == FAILING, f"the audit log's retries by admin: {entries['sqlqueue.retry_failed']}")
    expect(
        deleted == [("op", True, 1), ("op", False, FAILING - 1)],
        f"the audit log's deletes: {entries['sqlqueue.delete_failed']}",
    )
    log(f"audit log: admin's retry ({sum(retried)} messages), op's deletes {deleted}")
    page.close()


# ---- main --------------------------------------------------------------------------------------
def run_check(images: Path, home: Path) -> None:
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
                check_connection_form(page, stack, queue_file, images)
                timings["connection form"] = time.monotonic() - t1
                t1 = time.monotonic()
                check_sensor_run(page, stack, queue_file, images)
                timings["sensor run"] = time.monotonic() - t1
                t1 = time.monotonic()
                check_queues_page(page, stack, queue_file, images)
                check_other_type(page, stack)
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
        run_check(args.images.resolve(), home)
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
