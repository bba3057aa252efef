"""Every ``sqlqueue`` command the documentation shows exists, with the options it shows.

Two kinds of claim, read from README.md and every page under docs/ (docs/history keeps old records):

- a command line in a code block (``$ sqlqueue ...`` or ``sqlqueue ...``) is parsed by the command's own
  argparse parser, as the shell would hand it over: the command, its subcommands, options and values;
- a command named in running text (```sqlqueue failed retry --group```) has its subcommands and options
  looked up in the same parser's tree, placeholders (``ID``, ``TOPIC...``) and ``a|b`` alternatives allowed.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_sqlqueue.cli import _parser as new_parser

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *(p for p in sorted((REPO / "docs").rglob("*.md")) if "history" not in p.parts)]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
COMMAND_LINE = re.compile(r"^\s*(?:\$ )?(?:[A-Z_][A-Z0-9_]*=\S+ )*(sqlqueue(?: .*)?)$")
INLINE = re.compile(r"`(sqlqueue(?: [^`]*)?)`")


@functools.cache
def _parser() -> argparse.ArgumentParser:
    """The command's parser, built once: parsing leaves it as it was."""
    return new_parser()


def _relative(page: Path) -> str:
    return str(page.relative_to(REPO))


def _joined_lines(block: str) -> Iterator[str]:
    """The block's lines, a line ending in a backslash joined with the next, as the shell reads them."""
    pending = ""
    for line in block.splitlines():
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield pending + line
        pending = ""


def documented_command_lines() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for block in FENCE.findall(text):
            for line in _joined_lines(block):
                match = COMMAND_LINE.match(line)
                if match:
                    found.append((_relative(page), match.group(1)))
    return found


def documented_inline_commands() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        text = FENCE.sub("", page.read_text(encoding="utf-8"))
        found.extend((_relative(page), command) for command in INLINE.findall(text))
    return found


def shell_words(line: str) -> list[str]:
    """The words the command itself gets: up to a pipe, redirection, ``||``, ``&&`` or comment."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = []
    for word in lexer:
        if word and set(word) <= set("|&;<>()"):
            break
        words.append(word)
    return words


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def parse_error(words: list[str]) -> str | None:
    """What the real parser says about ``words`` (None: it accepts them)."""
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
        try:
            _parser().parse_args(words)
        except SystemExit as exit_:
            if exit_.code not in (0, None):
                return errors.getvalue().strip().splitlines()[-1]
    return None


def alternatives(words: list[str]) -> Iterator[list[str]]:
    """``failed list|show`` as ``failed list`` and ``failed show`` (a word with ``|`` is a choice)."""
    if not words:
        yield []
        return
    first, rest = words[0], words[1:]
    for choice in first.split("|") if "|" in first else [first]:
        for tail in alternatives(rest):
            yield [choice, *tail]


def tree_error(words: list[str]) -> str | None:
    """The first subcommand or option in ``words`` that the parser's tree does not have."""
    parser = _parser()
    command = ["sqlqueue"]
    for word in words:
        children = subcommands(parser)
        if word.startswith("-"):
            option = word.split("=", 1)[0]
            if option not in option_strings(parser):
                return f"{' '.join(command)} has no option {option}"
        elif children and word in children:
            parser = children[word]
            command.append(word)
        elif children and re.fullmatch(r"[a-z][a-z-]*", word):
            return f"{' '.join(command)} has no command {word} (it has {', '.join(sorted(children))})"
    return None


COMMAND_LINES = documented_command_lines()
INLINE_COMMANDS = documented_inline_commands()


def test_the_documentation_shows_commands_to_check() -> None:
    pages = {page for page, _ in COMMAND_LINES + INLINE_COMMANDS}
    assert "docs/cli.md" in pages and "docs/getting-started.md" in pages
    assert len(COMMAND_LINES) > 40 and len(INLINE_COMMANDS) > 30


@pytest.mark.parametrize(("page", "line"), COMMAND_LINES, ids=[f"{p}: {c}" for p, c in COMMAND_LINES])
def test_a_documented_command_line_parses(page: str, line: str) -> None:
    words = shell_words(line)
    assert words[0] == "sqlqueue"
    assert parse_error(words[1:]) is None, f"{page}: `{line}`: {parse_error(words[1:])}"


@pytest.mark.parametrize(("page", "text"), INLINE_COMMANDS, ids=[f"{p}: {c}" for p, c in INLINE_COMMANDS])
def test_a_command_named_in_the_text_exists_with_its_options(page: str, text: str) -> None:
    words = text.split()[1:]
    for variant in alternatives(words):
        assert tree_error(variant) is None, f"{page}: `{text}`: {tree_error(variant)}"


def test_the_checks_catch_a_command_or_option_that_does_not_exist() -> None:
    assert parse_error(["browse", "orders"]) is not None
    assert parse_error(["send", "orders", "x", "--priority", "3"]) is not None
    assert tree_error(["watch"]) is not None
    assert tree_error(["failed", "retry", "--everything"]) is not None
    assert [tree_error(v) is None for v in alternatives(["failed", "list|browse"])] == [True, False]


# "`sqlqueue` create, drop, ... and consume"; "**`sqlqueue` command** ([cli](docs/cli.md)): create, ..."
COMMAND_LIST = re.compile(
    r"`sqlqueue`(?:\s+command\*\*\s+\(\[cli\]\([^)]*\)\):)?\s+(?!commands?\b)((?:[a-z][a-z-]*,\s+){2,}[a-z][a-z-]*(?:\s+and\s+[a-z][a-z-]*)?)"
)


def documented_command_lists() -> list[tuple[str, list[str]]]:
    found = []
    for page in PAGES:
        for names in COMMAND_LIST.findall(page.read_text(encoding="utf-8")):
            found.append((_relative(page), re.split(r",\s+|\s+and\s+", names)))
    return found


def test_the_commands_a_page_lists_exist() -> None:
    lists = documented_command_lists()
    assert {page for page, _ in lists} >= {"README.md", "docs/index.md"}
    commands = subcommands(_parser())
    for page, names in lists:
        unknown = [name for name in names if name not in commands]
        assert not unknown, f"{page} lists commands sqlqueue does not have: {unknown}"


def test_the_list_check_reads_a_list_with_a_command_that_does_not_exist() -> None:
    (names,) = COMMAND_LIST.findall("`sqlqueue` create, browse, watch and purge, from a shell")
    assert [name for name in re.split(r",\s+|\s+and\s+", names) if name not in subcommands(_parser())] == [
        "browse",
        "watch",
        "purge",
    ]
