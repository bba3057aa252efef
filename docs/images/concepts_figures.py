"""Draws the two pictures of docs/concepts.md as plain SVG (standard library only).

python docs/images/concepts_figures.py    # rewrites docs/images/queue-table.svg and receive-flow.svg
"""

from html import escape
from pathlib import Path

INK, MUTED, LINE = "#1f2937", "#6b7280", "#9ca3af"
HEAD = "#3949ab"
TEAL, TEAL_BG = "#0d9488", "#ccfbf1"
AMBER, AMBER_BG = "#b45309", "#fef3c7"
A, A_BG = "#2563eb", "#dbeafe"
B, B_BG = "#16a34a", "#dcfce7"
C, C_BG = "#c2410c", "#ffedd5"
GREY_BG, RED = "#f3f4f6", "#dc2626"
FONT = "Helvetica, Arial, sans-serif"
MONO = "Menlo, Consolas, 'DejaVu Sans Mono', monospace"


def text(x, y, s, size=13, fill=INK, anchor="start", weight="normal", family=None, extra=""):
    fam = f' font-family="{family}"' if family else ""
    w = f' font-weight="{weight}"' if weight != "normal" else ""
    a = f' text-anchor="{anchor}"' if anchor != "start" else ""
    return f'<text x="{x}" y="{y}" font-size="{size}" fill="{fill}"{a}{w}{fam}{extra}>{escape(s)}</text>'


def rect(x, y, w, h, fill, stroke=LINE, sw=1, rx=0, extra=""):
    r = f' rx="{rx}"' if rx else ""
    return (
        f'<rect x="{x}" y="{y}" width="{w}" height="{h}"{r} fill="{fill}" '
        f'stroke="{stroke}" stroke-width="{sw}"{extra}/>'
    )


def line(x1, y1, x2, y2, stroke=LINE, sw=1, extra=""):
    return f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{stroke}" stroke-width="{sw}"{extra}/>'


def svg(width, height, title, desc, body):
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
            f'height="{height}" font-family="{FONT}" role="img" aria-labelledby="title desc">',
            f'<title id="title">{escape(title)}</title>',
            f'<desc id="desc">{escape(desc)}</desc>',
            "<defs>",
            *(
                f'<marker id="arrow-{n}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
                f'markerHeight="7" orient="auto-start-reverse">'
                f'<path d="M0,0 L10,5 L0,10 z" fill="{c}"/></marker>'
                for n, c in (("ink", INK), ("teal", TEAL), ("amber", AMBER), ("a", A), ("b", B), ("c", C))
            ),
            "</defs>",
            rect(0, 0, width, height, "#ffffff", stroke="none", sw=0),
            *body,
            "</svg>",
            "",
        ]
    )


def pill(x, y, label, colour, background):
    width = 7.2 * len(label) + 16
    return [
        rect(x - width, y - 14, width, 20, background, colour, 1.2, rx=10),
        text(x - width / 2, y + 1, label, 11.5, colour, "middle", "bold"),
    ]


def queue_table():
    columns = [  # name, SQL Server type, what it holds
        ("Id", "uniqueidentifier", "message id (a UUID), made by the sender"),
        ("CorrelationId", "varchar(255)", "legacy: copy of its header"),
        ("ReplyToAddress", "varchar(255)", "legacy: copy of its header"),
        ("Recoverable", "bit", "legacy: always 1"),
        ("Expires", "datetime", "UTC, from the database clock; NULL: never"),
        ("Headers", "nvarchar(max)", "the header map as JSON"),
        ("Body", "varbinary(max)", "the message body, as bytes"),
        ("RowVersion", "bigint IDENTITY", "queue order, numbered by the database"),
    ]
    x0, y0, card_w, head_h, row_h = 20, 84, 420, 34, 44
    b = [
        text(x0, 32, "A queue is one table", 20, weight="bold"),
        text(
            x0,
            56,
            "One row per message. The columns of the NServiceBus SQL Server transport, in its order.",
            13,
            MUTED,
        ),
    ]
    # the table definition, as a card
    card_h = head_h + row_h * len(columns)
    b.append(rect(x0, y0, card_w, card_h, "#ffffff", INK, 1.2, rx=6))
    b.append(rect(x0, y0, card_w, head_h, HEAD, HEAD, 1.2, rx=6))
    b.append(rect(x0, y0 + head_h - 8, card_w, 8, HEAD, "none", 0))
    b.append(text(x0 + 14, y0 + 22, "[dbo].[orders]", 14, "#ffffff", weight="bold", family=MONO))
    b.append(text(x0 + card_w - 14, y0 + 22, "SQL Server types", 12, "#e0e7ff", "end"))
    for i, (name, sql_type, note) in enumerate(columns):
        y = y0 + head_h + i * row_h
        if name in ("Expires", "RowVersion"):
            b.append(
                rect(x0 + 1, y, card_w - 2, row_h, AMBER_BG if name == "Expires" else TEAL_BG, "none", 0)
            )
        if i:
            b.append(line(x0, y, x0 + card_w, y, "#e5e7eb", 1))
        b.append(text(x0 + 14, y + 19, name, 13.5, INK, weight="bold"))
        b.append(text(x0 + 150, y + 19, sql_type, 12, MUTED, family=MONO))
        b.append(text(x0 + 14, y + 36, note, 12, MUTED))
        if name == "Expires":
            b += pill(x0 + card_w - 12, y + 19, "index", AMBER, "#ffffff")
        if name == "RowVersion":
            b += pill(x0 + card_w - 12, y + 19, "clustered index", TEAL, "#ffffff")
    # rows in queue order
    rx0, mini_w, mini_h = x0 + card_w + 40, 300, 32
    rows = [
        ("41", "NULL", '{"order": 17}', False),
        ("42", "10:05", '{"order": 18}', True),
        ("43", "NULL", '{"order": 19}', False),
        ("44", "11:30", '{"order": 20}', False),
        ("45", "NULL", '{"order": 21}', False),
    ]
    widths = (70, 90, 140)
    b.append(text(rx0, y0 - 8, "its rows, in RowVersion order", 13, MUTED, weight="bold"))
    hx = rx0
    for label, w in zip(("RowVersion", "Expires", "Body"), widths, strict=True):
        b.append(text(hx + w / 2, y0 + 14, label, 12, MUTED, "middle", "bold"))
        hx += w
    top = y0 + 24
    for i, (row_version, expires, body, expired) in enumerate(rows):
        y = top + i * mini_h
        b.append(rect(rx0, y, mini_w, mini_h - 4, GREY_BG if expired else "#ffffff", LINE, 1.2, rx=4))
        b.append(rect(rx0, y, widths[0], mini_h - 4, TEAL_BG, LINE, 1.2, rx=4))
        b.append(text(rx0 + widths[0] / 2, y + 19, row_version, 13.5, INK, "middle", "bold"))
        colour = RED if expired else (MUTED if expires == "NULL" else INK)
        b.append(
            text(
                rx0 + widths[0] + widths[1] / 2,
                y + 19,
                expires + (" (past)" if expired else ""),
                12,
                colour,
                "middle",
            )
        )
        b.append(text(rx0 + widths[0] + widths[1] + 10, y + 19, body, 12, INK, family=MONO))
    y = top + len(rows) * mini_h
    b.append(rect(rx0, y, mini_w, mini_h - 4, "#ffffff", TEAL, 1.2, rx=4, extra=' stroke-dasharray="5 4"'))
    b.append(text(rx0 + widths[0] / 2, y + 19, "46", 13.5, TEAL, "middle", "bold"))
    b.append(text(rx0 + widths[0] + 10, y + 19, "the next send", 12.5, TEAL))
    ax = rx0 + mini_w + 18
    b.append(line(ax, top + 4, ax, y + mini_h - 8, TEAL, 2, ' marker-end="url(#arrow-teal)"'))
    b.append(text(ax + 10, top + 16, "head", 12.5, TEAL, weight="bold"))
    b.append(text(ax + 10, y + 19, "tail", 12.5, TEAL, weight="bold"))
    # what the two operations and the two indexes do
    notes_y = y + mini_h + 18
    boxes = [
        (
            TEAL,
            TEAL_BG,
            "send = one INSERT at the tail",
            "receive = one DELETE of the oldest rows at the head",
            "The clustered index on RowVersion keeps rows in this order.",
        ),
        (
            AMBER,
            AMBER_BG,
            "Expired rows (42) are dropped by the receive",
            "that reaches them; purge_expired()",
            "finds the others through the Expires index.",
        ),
    ]
    for colour, background, first, second, third in boxes:
        b.append(rect(rx0, notes_y, mini_w + 60, 74, background, colour, 1.4, rx=6))
        b.append(text(rx0 + 12, notes_y + 22, first, 12.5, colour, weight="bold"))
        b.append(
            text(
                rx0 + 12,
                notes_y + 42,
                second,
                12.5,
                colour if colour == TEAL else INK,
                weight="bold" if colour == TEAL else "normal",
            )
        )
        b.append(text(rx0 + 12, notes_y + 62, third, 12.5))
        notes_y += 86
    height = max(y0 + card_h, notes_y - 12) + 20
    return svg(
        rx0 + mini_w + 60 + 20,
        height,
        "The queue table",
        "The eight columns of a queue table with their SQL Server types, and its rows in RowVersion order: "
        "the clustered index on RowVersion orders the queue, Expires has its own index.",
        b,
    )


def receive_flow():
    rows = [
        ("41", "order 17", "A", False),
        ("42", "order 18", "A", True),
        ("43", "order 19", "A", False),
        ("44", "order 20", "B", False),
        ("45", "order 21", "B", False),
        ("46", "order 22", "B", False),
        ("47", "order 23", "C", False),
        ("48", "order 24", "C", False),
        ("49", "order 25", None, False),
        ("50", "order 26", None, False),
    ]
    colours = {"A": (A, A_BG), "B": (B, B_BG), "C": (C, C_BG)}
    x0, y0, row_h, col_w = 30, 112, 34, 220
    b = [
        text(x0, 34, "Receiving: competing consumers", 20, weight="bold"),
        text(
            x0,
            58,
            "Each receive deletes the oldest rows that no other open receive holds, and skips the held ones "
            "instead of waiting.",
            13,
            MUTED,
        ),
        text(x0, 96, "queue table orders", 13, MUTED, weight="bold"),
        text(x0 + col_w - 8, 96, "RowVersion ↓", 12, TEAL, "end"),
    ]
    for i, (rv, label, owner, expired) in enumerate(rows):
        y = y0 + i * row_h
        stroke, fill = colours[owner] if owner else (LINE, "#ffffff")
        if expired:
            fill = GREY_BG
        b.append(rect(x0, y, col_w, row_h - 4, fill, stroke, 1.4, rx=4))
        b.append(text(x0 + 14, y + 20, rv, 14, INK, weight="bold"))
        b.append(text(x0 + 56, y + 20, label, 13, MUTED if expired else INK))
        if expired:
            b.append(line(x0 + 54, y + 15, x0 + 120, y + 15, RED, 1.6))
            b.append(text(x0 + col_w - 12, y + 20, "expired", 12, RED, "end", "bold"))
        elif owner:
            # a small padlock
            lx, ly = x0 + col_w - 26, y + 8
            b.append(
                f'<path d="M{lx + 3},{ly + 7} v-3 a4,4 0 0 1 8,0 v3" fill="none" '
                f'stroke="{stroke}" stroke-width="1.6"/>'
            )
            b.append(rect(lx, ly + 7, 14, 10, stroke, stroke, 1, rx=2))
    # sender at the tail
    ty = y0 + len(rows) * row_h
    b.append(rect(x0, ty, col_w, row_h - 4, "#ffffff", TEAL, 1.4, rx=4, extra=' stroke-dasharray="5 4"'))
    b.append(text(x0 + 14, ty + 20, "51", 14, TEAL, weight="bold"))
    b.append(text(x0 + 56, ty + 20, "next send (INSERT)", 13, TEAL))
    # receivers
    rx0, rw = x0 + col_w + 70, 440
    groups = [
        (
            "A",
            0,
            3,
            "Receiver A: receive(max_messages=3)",
            [
                "DELETEs 41, 42, 43 and holds them until its block ends.",
                "Its code gets 41 and 43. 42 had expired: dropped and",
                "counted in batch.expired, never handed to code.",
            ],
        ),
        (
            "B",
            3,
            3,
            "Receiver B: receive(max_messages=3)",
            [
                "Starts while A holds 41 to 43: READPAST (SQL Server) /",
                "SKIP LOCKED (PostgreSQL) skip A's rows without",
                "waiting, so B takes 44, 45, 46.",
            ],
        ),
        (
            "C",
            6,
            2,
            "Receiver C: receive(max_messages=2)",
            ["Skips A's and B's rows and takes 47, 48.", "49 and 50 wait for the next receive."],
        ),
    ]
    for key, start, count, title, lines in groups:
        stroke, fill = colours[key]
        top = y0 + start * row_h
        bottom = top + count * row_h - 4
        mid = (top + bottom) / 2
        # bracket
        bx = x0 + col_w + 12
        b.append(
            f'<path d="M{bx},{top + 2} h10 v{bottom - top - 4} h-10" fill="none" '
            f'stroke="{stroke}" stroke-width="2"/>'
        )
        box_h = max(34 + 18 * len(lines), bottom - top)
        by = top
        b.append(line(bx + 10, mid, rx0 - 2, mid, stroke, 1.8, f' marker-start="url(#arrow-{key.lower()})"'))
        b.append(rect(rx0, by, rw, box_h, fill, stroke, 1.5, rx=6))
        b.append(text(rx0 + 12, by + 20, title, 13.5, stroke, weight="bold"))
        for j, s in enumerate(lines):
            b.append(text(rx0 + 12, by + 39 + 18 * j, s, 12.5))
    # outcome
    oy = ty + row_h + 28
    b += [
        rect(x0, oy, col_w + 70 + rw, 66, "#f9fafb", LINE, 1, rx=6),
        text(x0 + 14, oy + 24, "Block ends normally: commit", 13, INK, weight="bold"),
        text(x0 + 222, oy + 24, "the receiver's rows are deleted for good.", 13),
        text(x0 + 14, oy + 48, "Exception in the block: rollback", 13, INK, weight="bold"),
        text(x0 + 222, oy + 48, "the rows are unlocked, keep their RowVersions, and are received first.", 13),
    ]
    sy = oy + 96
    sql = [
        ("SQL Server", "WITH message AS (SELECT TOP(n) * FROM [orders] WITH (UPDLOCK, READPAST, ROWLOCK)"),
        ("", "    ORDER BY [RowVersion]) DELETE FROM message OUTPUT deleted.*"),
        ("PostgreSQL", "WITH taken AS MATERIALIZED (SELECT RowVersion FROM orders ORDER BY RowVersion"),
        ("", "    LIMIT n FOR UPDATE SKIP LOCKED) DELETE FROM orders"),
        ("", "    WHERE RowVersion IN (SELECT RowVersion FROM taken) RETURNING ..."),
    ]
    b.append(rect(x0, sy - 20, col_w + 70 + rw, 20 * len(sql) + 48, "#ffffff", LINE, 1, rx=6))
    for k, (engine, stmt) in enumerate(sql):
        y = sy + 6 + 20 * k
        if engine:
            b.append(text(x0 + 14, y, engine, 12.5, INK, weight="bold"))
        b.append(text(x0 + 110, y, stmt, 11.5, INK, family=MONO))
    b.append(
        text(
            x0 + 14,
            sy + 6 + 20 * len(sql) + 4,
            "SQLite has no row locks: a receive takes the database's "
            "write lock (BEGIN IMMEDIATE) and the next receiver waits its turn.",
            12,
            MUTED,
        )
    )
    height = sy + 20 * len(sql) + 48
    return svg(
        x0 + col_w + 70 + rw + 30,
        height,
        "Competing consumers",
        "Three receivers take the oldest unlocked rows of one queue table; locked rows are skipped, an "
        "expired row is dropped, and a rollback puts rows back at the head.",
        b,
    )


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    (here / "queue-table.svg").write_text(queue_table(), encoding="utf-8")
    (here / "receive-flow.svg").write_text(receive_flow(), encoding="utf-8")
