"""The docs against the code: every `rideout` command and option they name exists, every
repository path they name is there, every key docs/configuration.md shows is accepted,
and the README's pattern status lines claim nothing missing is missing.

The pages checked are the README, ARCHITECTURE.md and docs/*.md; docs/history/ holds
dated journals, which describe the code as it was and are not checked.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer.main

from rideout.cli import app
from rideout.config import parse_config

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", ROOT / "ARCHITECTURE.md", *(ROOT / "docs").glob("*.md")])

# Options of other programs that the docs name on their own (a span that is only the
# option), each with the program it belongs to. A `rideout` option never needs to be here.
OTHER_TOOLS_OPTIONS = {
    "--dist": "pytest-xdist (`--dist loadscope`)",
    "--no-loadscope-reorder": "pytest-xdist",
    "--durations": "pytest",
    "--no-compile": "pip",
    "--nonblocking": "py-spy",
    "--ws": "uvicorn",
    "--quick": "bench.realtime, bench.room, bench.dns",
    "--overhead-only": "bench.http_client",
    "--share": "bench.steal",
    "--period": "bench.steal (also a `rideout drill surge` option)",
    "--trials": "bench.fault_to_alarm",
    "--faults": "bench.fault_to_alarm",
    "--only": "bench.realtime, bench.room",
    "--rounds": "bench.*",
    "--keep": "bench.realtime",
    "--aclfile": "redis-server",
    "--protected-mode": "redis-server",
}

# Spans that start with `rideout` but quote a message, not a command.
MESSAGES = {
    "rideout is already running from .rideout (pid N)": "`rideout up`'s refusal",
}


def _page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


# ---------------------------------------------------------------- the CLI's tree


@dataclass(frozen=True)
class Node:
    options: frozenset[str]
    children: dict[str, Node]
    invokable: bool  # a group that runs on its own (its options may follow it)


def _node(command: Any) -> Node:
    options = frozenset(
        opt
        for param in command.params
        for opt in [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]
        if opt.startswith("--")
    ) | {"--help"}
    children = {name: _node(sub) for name, sub in getattr(command, "commands", {}).items()}
    invokable = not children or bool(getattr(command, "invoke_without_command", False))
    return Node(options, children, invokable)


CLI = _node(typer.main.get_command(app))


def every_option(node: Node = CLI) -> set[str]:
    out = set(node.options)
    for child in node.children.values():
        out |= every_option(child)
    return out


def resolve(words: list[str]) -> tuple[list[Node], str | None]:
    """The commands `rideout WORDS...` names (several for `a|b|c`), or the reason it
    names none. Descends while the next word names subcommands; stops at the first
    argument or option."""
    nodes = [CLI]
    for word in words:
        if word.startswith("-") or word.isupper() or not all(n.children for n in nodes):
            break  # an option, a placeholder (COMMAND, REGION) or a leaf's arguments
        names = word.split("|")
        if not all(re.fullmatch(r"[a-z][a-z0-9-]*", name) for name in names):
            if all(n.invokable for n in nodes):
                break  # an argument (REGION, us-east-1, ...)
            return [], f"{word!r} is not a subcommand"
        missing = [name for name in names for n in nodes if name not in n.children]
        if missing:
            return [], f"no command {' '.join(missing)!r}"
        nodes = [n.children[name] for name in names for n in nodes]
    return nodes, None


# ---------------------------------------------------------------- what the pages name

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
COMMAND = re.compile(r"(?:^|[\s($])(?:\S*/)?rideout((?:\s+[^\s#;&)]+)*)")
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


@dataclass(frozen=True)
class Mention:
    page: str
    text: str  # the span or shell line, for the failure message
    words: list[str]


def _prose(text: str) -> str:
    """The page without its fenced blocks."""
    return FENCE.sub("", text)


def command_mentions(path: Path) -> Iterator[Mention]:
    text = path.read_text()
    page = _page_id(path)
    for lang, body in FENCE.findall(text):
        if lang not in {"sh", "bash", "shell", "console"}:
            continue
        for line in body.splitlines():
            line = line.split(" #", 1)[0].lstrip("$ ").strip()
            match = COMMAND.search(line)
            if match and not line.startswith("#"):
                yield Mention(page, line, match.group(1).split())
    for span in SPAN.findall(_prose(text)):
        span = span.replace("\\|", "|")
        match = re.match(r"(?:\S*/)?rideout\s+(.*)", span)
        if match and span not in MESSAGES:
            yield Mention(page, span, match.group(1).split())


def option_spans(path: Path) -> Iterator[tuple[str, str]]:
    """Spans that are an option on its own (`--failback`, `--zone-id ID`)."""
    for span in SPAN.findall(_prose(path.read_text())):
        if span.startswith("--"):
            match = OPTION.match(span)
            if match:
                yield _page_id(path), match.group(1)


def test_the_cli_tree_is_read() -> None:
    # If typer's command tree changes shape, the checks below would pass vacuously.
    assert {"up", "drill", "evacuate", "room"} <= CLI.children.keys()
    assert "--failback" in CLI.children["drill"].children["region-outage"].options
    assert CLI.children["evacuate"].invokable
    assert not CLI.children["drill"].invokable


MENTIONS = [m for page in PAGES for m in command_mentions(page)]


def test_the_pages_name_commands() -> None:
    assert len(MENTIONS) > 50, len(MENTIONS)


@pytest.mark.parametrize("mention", MENTIONS, ids=lambda m: f"{m.page}:{m.text[:60]}")
def test_every_command_and_its_options_exist(mention: Mention) -> None:
    nodes, problem = resolve(mention.words)
    assert problem is None, f"{mention.page}: `rideout {' '.join(mention.words)}`: {problem}"
    options = set().union(*(n.options for n in nodes))
    for option in OPTION.findall(" ".join(mention.words)):
        assert option in options, (
            f"{mention.page}: `{mention.text}`: no option {option} "
            f"(it takes {', '.join(sorted(options))})"
        )


def test_every_option_named_on_its_own_exists() -> None:
    known = every_option()
    unknown = sorted(
        {
            f"{page}: {option}"
            for path in PAGES
            for page, option in option_spans(path)
            if option not in known and option not in OTHER_TOOLS_OPTIONS
        }
    )
    assert not unknown, "options no rideout command has (and no other tool's listed):\n" + (
        "\n".join(unknown)
    )


# ---------------------------------------------------------------- repository paths

REPO_PATH = re.compile(r"(?<![\w./-])((?:src|tests|docs|bench|deploy)/[\w./-]*[\w/])")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def path_mentions(path: Path) -> Iterator[tuple[str, Path]]:
    text = path.read_text()
    page = _page_id(path)
    for span in SPAN.findall(text):
        if "*" in span or "{" in span:
            continue  # a pattern, not a path
        for found in REPO_PATH.findall(span):
            yield page, ROOT / found.split("::", 1)[0]
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        yield page, (path.parent / target.split("#", 1)[0]).resolve()


def test_every_repository_path_named_exists() -> None:
    named = [(page, p) for path in PAGES for page, p in path_mentions(path)]
    assert len(named) > 100, len(named)
    missing = sorted({f"{page}: {p.relative_to(ROOT)}" for page, p in named if not p.exists()})
    assert not missing, "paths that are not in the repository:\n" + "\n".join(missing)


# ---------------------------------------------------------------- configuration keys

COMMENTED_KEY = re.compile(r"^#\s*(?=[a-z_]+\s*=)", re.M)


def configuration_examples() -> list[str]:
    text = (ROOT / "docs" / "configuration.md").read_text()
    return [body for lang, body in FENCE.findall(text) if lang == "toml"]


def test_configuration_md_shows_its_keys() -> None:
    blocks = configuration_examples()
    assert blocks, "docs/configuration.md has no ```toml example"
    assert "[failover]" in blocks[0]


@pytest.mark.parametrize("n", range(len(configuration_examples())))
def test_every_key_in_configuration_md_is_accepted(n: int) -> None:
    # Keys shown commented out (`# redis_server = ...`) are keys too.
    data = tomllib.loads(COMMENTED_KEY.sub("", configuration_examples()[n]))
    data.pop("redis_server", None)  # a path on the writer's machine; its key is checked below
    parse_config(data)


def test_the_commented_keys_are_checked_too() -> None:
    text = configuration_examples()[0]
    assert "redis_server" in tomllib.loads(COMMENTED_KEY.sub("", text))
    parse_config({"redis_server": "redis-server"})


# ---------------------------------------------------------------- the README's status lines


def status_lines() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## The four patterns", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]
    return [row.split("|")[2] for row in rows]


def test_the_readme_has_four_status_lines() -> None:
    assert len(status_lines()) == 4


@pytest.mark.parametrize("n", range(4))
def test_a_status_line_claims_nothing_missing_that_exists(n: int) -> None:
    line = status_lines()[n]
    for phrase in ("not yet", "to come", "not built", "planned", "todo"):
        assert phrase not in line.lower(), f"README status line {n + 1} says {phrase!r}: {line}"
    for span in SPAN.findall(line):
        match = re.match(r"rideout\s+(.*)", span)
        if match:
            _, problem = resolve(match.group(1).split())
            assert problem is None, f"README status line {n + 1}: `{span}`: {problem}"
        module = re.fullmatch(r"rideout(\.\w+)+", span)
        if module:
            __import__(span)  # a module a status line names must exist
