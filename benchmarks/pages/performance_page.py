"""docs/performance.md: the current figures against their targets and against the peers, what is left, and
the client CPU a message costs, every block read from the last benchmark run (docs/benchmarks/results.json
and docs/benchmarks/scale.json). Every statement that compares figures (targets met, missed or met by a
small margin, a peer's ceiling, which operation costs less) is computed here from that run; the record of
how the figures got there is docs/history/performance-tuning.md (pages/performance_history.py)."""

from __future__ import annotations

import json
from typing import Any

from pages.blocks import ROOT
from pages.throughput import (
    CORE_LABELS,
    ENGINE_LABELS,
    PEER_NAMES,
    compute_targets,
    core_row,
    value_text,
    wanted_text,
)

RESULTS = "docs/benchmarks/results.json"
SCALE = "docs/benchmarks/scale.json"
SOURCE = f"{RESULTS} and {SCALE}"
SAME_STATEMENTS = "the same statements"  # compute_targets' name for a ceiling of the project's own statements
NEAR_THE_LINE = 0.05  # a met ratio within this share of its threshold is reported as met by a small margin


def load_run() -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The last run's throughput JSON and its scale JSON (None when no scale run is committed)."""
    results = json.loads((ROOT / RESULTS).read_text(encoding="utf-8"))
    scale_path = ROOT / SCALE
    scale = json.loads(scale_path.read_text(encoding="utf-8")) if scale_path.exists() else None
    return results, scale


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def current_table(doc: dict[str, Any], targets: list[dict[str, Any]]) -> list[str]:
    """Every target of the run: how many are met, then one row per target."""
    meta = doc["meta"]
    machine = meta["machine"]
    met = sum(1 for target in targets if target["status"] == "PASS")
    measured = sum(1 for target in targets if target["status"] in ("PASS", "MISS"))
    rounds = _count(meta["repeat"], "round")
    lines = [
        f"**{met} of {measured} targets met** in the run recorded in `{RESULTS}` (the queue-depth targets "
        f"from `{SCALE}`), on {machine['cpus']} CPUs ({machine['cpu']}"
        f"{', a virtual machine' if machine.get('virtual_machine') else ''}); every ratio is the median of "
        f"{rounds}, with the rounds' range in the last column.",
        "",
        "| target | measured | wanted | result | figures |",
        "|---|--:|--:|:-:|---|",
    ]
    for target in targets:
        lines.append(
            f"| {target['target']} | **{value_text(target)}** | {wanted_text(target)} | {target['status']} | "
            f"{target['detail']} |"
        )
    return lines


def _ratio(value: float) -> str:
    return f"{value:.2f}x"


def peer_lines(targets: list[dict[str, Any]]) -> list[str]:
    """One statement per peer target: the project against the peer, against the ceiling (the raw driver
    running the project's statements, divided by the peer), and whether the ceiling itself reaches the
    target."""
    lines = []
    for target in targets:
        if "ceiling" not in target or target["value"] is None:
            continue
        ceiling, runs = target["ceiling"], target["ceiling_runs"]
        share = target["value"] / ceiling
        if runs == SAME_STATEMENTS:
            text = (
                f"the raw driver running the same statements, with nothing of the project around them, "
                f"reaches {_ratio(ceiling)}: the project runs at {_ratio(share)} of that ceiling"
            )
            if target["status"] == "MISS" and ceiling < target["threshold"]:
                text += ", and the ceiling is below the target: no client sending these statements meets it"
            elif target["status"] == "MISS":
                text += "; the ceiling is above the target, so the gap is the project's own work"
        else:
            text = (
                f"the raw driver running {runs} reaches {_ratio(ceiling)}, "
                f"the project {_ratio(share)} of that"
            )
        lines.append(
            f"- **{target['target']}**: {value_text(target)} (wanted {wanted_text(target)}, "
            f"{target['status']}); {text}."
        )
    return lines


def _shape(batch: int, workers: int, what: str) -> str:
    per = "one per transaction" if batch == 1 else f"{batch} per transaction"
    return f"{per}, {workers} {what}{'' if workers == 1 else 's'}"


def _peer_comparisons(doc: dict[str, Any]) -> list[tuple[str, str, str, float, str, float]]:
    """(engine, operation, peer and its shape, its msgs/s, this package and its shape, its msgs/s): every
    peer of the run beside this package doing the same operation, sends against sends, a bare receive
    against a bare receive, a handler against a handler, in the peer's shape (batch, consumers) where this
    package ran it. A peer whose consumer runs handlers (a worker) is compared at the handler level only."""
    rows = {(row["engine"], row["case"]): row for row in doc.get("handlers", {}).get("rows", [])}
    handler_peers = {case for (_, case), row in rows.items() if row["level"] == "handler"}
    compared = []
    for peer in doc.get("peers", []):
        engine, name = peer["engine"], PEER_NAMES.get(peer["peer"], peer["peer"])
        operations = [("send", "send_batch" if peer["send_batch"] > 1 else "send", peer["send_batch"], 1)]
        if peer["peer"] not in handler_peers:
            receive_case = {(1, 1): "receive_1c", (1, 4): "receive_4c"}.get(
                (peer["receive_batch"], peer["consumers"])
            )
            operations.append(("receive", receive_case, peer["receive_batch"], peer["consumers"]))
        for operation, case, batch, workers in operations:
            ours = core_row(doc, engine, case) if case else None
            if ours is None:
                continue
            label, our_batch, our_workers = CORE_LABELS[case]
            what = "sender" if operation == "send" else "consumer"
            compared.append(
                (
                    engine,
                    operation,
                    f"{name} ({_shape(batch, workers, what)})",
                    peer[f"{operation}_msgs_per_s"]["median"],
                    f"`{label}` ({_shape(our_batch, our_workers, what)})",
                    ours["project_msgs_per_s"],
                )
            )
    for (engine, case), row in rows.items():
        pump = rows.get((engine, f"pump_batch_{row['batch']}"))
        if case not in handler_peers or case.startswith("pump") or pump is None or not row["available"]:
            continue
        compared.append(
            (
                engine,
                "no-op handler",
                f"{PEER_NAMES.get(case, case)} ({_shape(row['batch'], row['concurrency'], 'worker')})",
                row["msgs_per_s"]["median"],
                f"`MessagePump` ({_shape(pump['batch'], pump['concurrency'], 'worker')})",
                pump["msgs_per_s"]["median"],
            )
        )
    return sorted(compared, key=lambda item: (list(ENGINE_LABELS).index(item[0]), item[1], item[2]))


def peers_table(doc: dict[str, Any]) -> list[str]:
    """Every peer measured, each beside this package doing the same operation, from the same run."""
    lines = [
        "| engine | operation | peer (its shape) | msgs/s | sqlqueue (its shape) | msgs/s "
        "| sqlqueue / peer |",
        "|---|---|---|--:|---|--:|--:|",
    ]
    for engine, operation, peer, peer_rate, ours, our_rate in _peer_comparisons(doc):
        lines.append(
            f"| {ENGINE_LABELS[engine]} | {operation} | {peer} | {peer_rate:,.0f} | {ours} | {our_rate:,.0f} "
            f"| **{our_rate / peer_rate:.2f}x** |"
        )
    machine = doc["meta"]["machine"]
    differing = [
        f"{ENGINE_LABELS[engine]} {peer.split(' (')[0]}'s {operation}"
        for engine, operation, peer, _, ours, _ in _peer_comparisons(doc)
        if peer[peer.rindex("(") :] != ours[ours.rindex("(") :]
    ]
    shapes = (
        f"The two shapes differ only for {', '.join(differing)}: this package was measured in its own "
        "shape there. "
        if differing
        else "Both sides ran in the same shape. "
    )
    return [
        *lines,
        "",
        shapes
        + f"Medians of {_count(doc['meta']['repeat'], 'round')} each, measured in one run on the same server "
        f"and the same {machine['cpus']} cores; the ratio divides the two medians. Each peer keeps the "
        "durability and acknowledgement it ships with; the [Benchmarks](benchmarks.md#what-each-case-does) "
        "page gives each one's settings and every figure of the run.",
    ]


def left_lines(targets: list[dict[str, Any]]) -> list[str]:
    """The targets this run missed, and those it met by a small margin (a run can land on either side)."""
    missed = [target for target in targets if target["status"] == "MISS"]
    near = [
        target
        for target in targets
        if target["status"] == "PASS"
        and target.get("unit") == "x"
        and abs(target["value"] - target["threshold"]) < NEAR_THE_LINE * target["threshold"]
    ]
    lines = []
    if missed:
        lines.append(f"**Missed in this run** ({_count(len(missed), 'target')}):")
        lines.append("")
        for target in missed:
            beyond = ""
            same = target.get("ceiling_runs") == SAME_STATEMENTS
            if same and target["ceiling"] < target["threshold"]:
                beyond = (
                    f"; beyond what the raw driver running the same statements reaches "
                    f"({_ratio(target['ceiling'])}) on this server"
                )
            lines.append(f"- {target['target']}: {value_text(target)}, wanted {wanted_text(target)}{beyond}.")
    else:
        lines.append("**Every target was met in this run.**")
    lines.append("")
    if near:
        lines.append(
            f"**Met by less than {NEAR_THE_LINE:.0%} of the threshold** ({_count(len(near), 'target')}; "
            "another run can land on either side of the line):"
        )
        lines.append("")
        lines += [f"- {t['target']}: {value_text(t)}, wanted {wanted_text(t)}." for t in near]
    else:
        lines.append(f"No target was met by less than {NEAR_THE_LINE:.0%} of its threshold.")
    return lines


def cpu_lines(doc: dict[str, Any]) -> list[str]:
    """The client CPU per message of each project-vs-raw case, and what batching saves, from the run."""
    lines = [
        "| engine | operation | per transaction | consumers | client CPU µs/msg, raw driver | sqlqueue |",
        "|---|---|--:|--:|--:|--:|",
    ]
    for row in doc.get("core", []):
        default = (row["case"], row["batch"], row["consumers"])
        operation, batch, consumers = CORE_LABELS.get(row["case"], default)
        lines.append(
            f"| {ENGINE_LABELS[row['engine']]} | `{operation}` | {batch} | {consumers} | "
            f"{row['raw_cpu_us_per_msg']:.1f} | {row['project_cpu_us_per_msg']:.1f} |"
        )
    lines.append("")
    for engine in ("postgresql", "sqlite"):
        pairs = [
            (name, core_row(doc, engine, single), core_row(doc, engine, batched))
            for name, single, batched in (
                ("a send", "send", "send_batch"),
                ("a receive", "receive_1c", "receive_batch_1c"),
            )
        ]
        parts = [
            f"{name} of 100 per transaction costs {many['project_cpu_us_per_msg']:.1f} µs of client CPU per "
            f"message against {one['project_cpu_us_per_msg']:.1f} µs for one per transaction "
            f"({many['project_cpu_us_per_msg'] / one['project_cpu_us_per_msg']:.0%})"
            for name, one, many in pairs
            if one and many
        ]
        if parts:
            lines.append(f"- {ENGINE_LABELS[engine]}: " + "; ".join(parts) + ".")
    return lines


def blocks() -> dict[str, tuple[str, list[str]]]:
    doc, scale = load_run()
    targets = compute_targets(doc, scale, issue18=True)
    return {
        "performance-current": (SOURCE, current_table(doc, targets)),
        "performance-peer-table": (RESULTS, peers_table(doc)),
        "performance-peers": (SOURCE, peer_lines(targets)),
        "performance-left": (SOURCE, left_lines(targets)),
        "performance-cpu": (RESULTS, cpu_lines(doc)),
    }
