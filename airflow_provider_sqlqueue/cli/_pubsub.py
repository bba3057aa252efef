"""The publish/subscribe subcommands: subscribe a queue to topics, unsubscribe an endpoint, list the
subscription table, and publish one message to every subscriber of a topic."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ._send import add_message_arguments, read_body
from ._support import CliError, Exit, connected, existing_queue, note, print_json

if TYPE_CHECKING:
    from ..transport import SubscriptionStore, Transport


def _store(transport: Transport) -> SubscriptionStore:
    """The transport's subscription table, or a :class:`CliError` saying it is missing."""
    store = transport.subscriptions
    if not store.exists():
        raise CliError(
            Exit.QUEUE_MISSING,
            f"the subscription table {store.address} does not exist in {transport.description}",
            "create it with: sqlqueue create --subscriptions (needs DDL rights), or check --schema",
        )
    return store


def _record(subscription: Any) -> dict[str, str]:
    return {
        "endpoint": subscription.endpoint,
        "topic": subscription.topic,
        "queue": subscription.queue_address,
    }


def subscribe(args: argparse.Namespace, out: Console, err: Console) -> int:
    with connected(args) as transport:
        store = _store(transport)
        queue = existing_queue(transport, args.queue)
        endpoint = args.endpoint or queue.address.table
        made = [store.subscribe(endpoint, topic, queue.address) for topic in dict.fromkeys(args.topics)]
    for subscription in made:
        if args.json:
            print_json(_record(subscription))
        else:
            note(
                out,
                f"{subscription.endpoint} subscribed to {subscription.topic} in {subscription.queue_address}",
            )
    return Exit.OK


def unsubscribe(args: argparse.Namespace, out: Console, err: Console) -> int:
    with connected(args) as transport:
        store = _store(transport)
        removed = {topic: store.unsubscribe(args.endpoint, topic) for topic in dict.fromkeys(args.topics)}
    for topic, was_there in removed.items():
        if args.json:
            print_json({"endpoint": args.endpoint, "topic": topic, "removed": was_there})
        elif was_there:
            note(out, f"{args.endpoint} unsubscribed from {topic}")
        else:
            note(out, f"{args.endpoint} was not subscribed to {topic}", "yellow")
    return Exit.OK


def subscriptions(args: argparse.Namespace, out: Console, err: Console) -> int:
    with connected(args) as transport:
        store = _store(transport)
        rows = store.list(args.topic, endpoint=args.endpoint)
        where = f"{store.address} in {transport.description}"
    if args.json:
        for row in rows:
            print_json(_record(row))
        return Exit.OK
    if not rows:
        note(err, f"no subscriptions in {where}")
        return Exit.OK
    table = Table(title=Text(f"subscriptions in {where}"), title_justify="left")
    for column in ("topic", "endpoint", "queue"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(Text(row.topic), Text(row.endpoint), Text(row.queue_address))
    out.print(table)
    return Exit.OK


def publish(args: argparse.Namespace, out: Console, err: Console) -> int:
    headers = {"NServiceBus.ContentType": args.content_type} if args.content_type else {}
    headers.update(args.header or [])  # an explicit -H wins
    body = read_body(args)
    with connected(args) as transport:
        _store(transport)
        result = transport.publish(
            args.topic,
            body,
            headers,
            base_topics=args.base_topic or (),
            time_to_be_received=args.time_to_be_received,
        )
    if args.json:
        print_json(
            {
                "topic": args.topic,
                "topics": list(result.topics),
                "id": str(result.message_id),
                "queues": list(result.queues),
            }
        )
        return Exit.OK
    if result.queues:
        note(
            out, f"published {result.message_id} to {len(result.queues)} queue(s): {', '.join(result.queues)}"
        )
    else:
        note(
            out,
            f"published {result.message_id}: nobody subscribed to {', '.join(result.topics)}, nothing sent",
        )
    return Exit.OK


def add_pubsub_commands(
    commands: argparse._SubParsersAction,
    common: argparse.ArgumentParser,
    command: Callable[..., argparse.ArgumentParser],
    run: Callable[[str], Callable[[argparse.Namespace, Console, Console], int]],
) -> None:
    """``sqlqueue subscribe|unsubscribe|subscriptions|publish``: ``command`` and ``run`` are the main
    parser's helpers."""
    p = command(
        commands,
        "subscribe",
        common,
        "subscribe a queue to topics (an upsert)",
        "Record in the subscription table that ENDPOINT (default: the queue's name) receives the events of "
        "each TOPIC in QUEUE. Subscribing the same endpoint and topic again moves it to the queue given. "
        "A publisher that looked the topic up less than its cache time ago (5 s by default) sends to the "
        "queues it found then.",
        "  sqlqueue subscribe --url sqlite:///queues.db billing Shop.Events.OrderPlaced\n"
        "  sqlqueue subscribe billing Shop.Events.OrderPlaced Shop.Events.OrderPaid --endpoint Billing\n",
    )
    p.add_argument("queue", metavar="QUEUE", help="the subscriber's queue, e.g. billing")
    p.add_argument("topics", nargs="+", metavar="TOPIC", help="e.g. Shop.Events.OrderPlaced")
    p.add_argument(
        "--endpoint", metavar="NAME", help="the subscribing endpoint's name (default: the queue's)"
    )
    p.add_argument("--json", action="store_true", help='one {"endpoint", "topic", "queue"} per topic')
    p.set_defaults(run=run("subscribe"))

    p = command(
        commands,
        "unsubscribe",
        common,
        "remove an endpoint's subscriptions to topics",
        "Delete ENDPOINT's subscription to each TOPIC from the subscription table. Publishers that looked "
        "the topic up within their cache time may still send it one more event.",
        "  sqlqueue unsubscribe --url sqlite:///queues.db billing Shop.Events.OrderPlaced --json\n",
    )
    p.add_argument(
        "endpoint", metavar="ENDPOINT", help="the endpoint's name, as 'sqlqueue subscriptions' shows"
    )
    p.add_argument("topics", nargs="+", metavar="TOPIC")
    p.add_argument("--json", action="store_true", help='one {"endpoint", "topic", "removed"} per topic')
    p.set_defaults(run=run("unsubscribe"))

    p = command(
        commands,
        "subscriptions",
        common,
        "list the subscription table",
        "List the subscriptions (topic, endpoint, queue), ordered by topic and endpoint; --topic and "
        "--endpoint narrow it to exact matches.",
        "  sqlqueue subscriptions --url sqlite:///queues.db\n"
        "  sqlqueue subscriptions --topic Shop.Events.OrderPlaced --json\n",
    )
    p.add_argument("--topic", metavar="TOPIC", help="only this topic")
    p.add_argument("--endpoint", metavar="NAME", help="only this endpoint")
    p.add_argument("--json", action="store_true", help='one {"endpoint", "topic", "queue"} per subscription')
    p.set_defaults(run=run("subscriptions"))

    p = command(
        commands,
        "publish",
        common,
        "publish a message to every subscriber of a topic",
        "Send one copy of the message to each distinct queue subscribed to TOPIC or to a --base-topic, all "
        "in one transaction, with NServiceBus.MessageIntent Publish and NServiceBus.EnclosedMessageTypes "
        "naming the topics (unless -H gives it). The body is the BODY argument, the contents of --file, or "
        "stdin. With no subscriber nothing is sent (exit 0; --json shows an empty list of queues).",
        "  sqlqueue publish --url sqlite:///queues.db Shop.Events.OrderPlaced '{\"order\": 42}' "
        "--content-type application/json\n"
        "  sqlqueue publish Shop.Events.OrderPlaced --file order.json --base-topic Shop.Events --json\n",
    )
    p.add_argument("topic", metavar="TOPIC")
    add_message_arguments(p, "discard each copy")
    p.add_argument(
        "--base-topic",
        action="append",
        metavar="TOPIC",
        help="an ancestor topic whose subscribers get the message too (repeatable, most specific first)",
    )
    p.add_argument("--json", action="store_true", help='print {"topic", "topics", "id", "queues"}')
    p.set_defaults(run=run("publish"))
