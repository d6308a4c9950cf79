"""A console transcript in a Markdown page, as a test reads it: its ```` ```console ````
blocks of ``$ command`` lines each followed by what the command printed; and what changes
from one run to the next, written as placeholders so that two runs read the same.

The placeholders (documented in docs/first-hour.md):

- ids and keys a later command names, numbered from their first appearance:
  ``<receipt-id>``, ``<receipt-id-2>``, …, ``<run-id>``, ``<workflow-id>``, ``<tenant-id>``,
  ``<api-key>``, ``<key-id>``, ``<connection-id>``, ``<approval-id>``; a command that
  names one is run with the value it stands for;
- what no command names: ``<time>``, ``<seconds>``, ``<ms>``, ``<uuid>``, ``<trace-id>``,
  ``<pid>``, ``<folder>`` (where the stack runs), ``<kid>``, ``<digest>``,
  ``<fingerprint>``, ``<sealing-key-id>``, ``<slack-ts>``, ``<effect-key>``, ``<host>``.

Ports are written as their defaults (``8000``, ``8233``…): the test's stack listens on
others of as many digits, so tables keep their layout."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

FENCE = re.compile(r"^```console\n(.*?)^```$", re.MULTILINE | re.DOTALL)
# A value's characters may be split by the end of a table's or a tree's line.
BREAK = r"(?:[ │┃]*\n[ │┃]*)?"
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
HEX32 = r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])"

# Values a later command may name, by kind: (placeholder, pattern, group holding the value).
NAMED: tuple[tuple[str, str, int], ...] = (
    ("api-key", r"moat_([a-z0-9]{12})_[A-Za-z0-9_-]{20,}", 0),
    ("workflow-id", r"exec(?:/|%2F)ten_[a-z0-9]{16}(?:/|%2F)[0-9a-f]{32}", 0),
    ("tenant-id", r"ten_[a-z0-9]{16}", 0),
    ("connection-id", r"con_[a-z0-9]{20}", 0),
    ("approval-id", r"apr_[a-z0-9]{10,}", 0),
    ("run-id", rf"/({UUID})/history", 1),
    ("run-id", rf"run_id\W+({UUID})", 1),
    ("receipt-id", rf"^[a-z]+  ({UUID})  \(", 1),
    ("receipt-id", rf"(?:receipt|execution) ({UUID})", 1),
    ("receipt-id", rf"\"(?:receipt_id|correlation_id)\": \"({UUID})\"", 1),
    ("receipt-id", rf"^│ ({UUID}) │", 1),
    ("key-id", r"key:([a-z0-9]{12})\b", 1),
    ("key-id", r"moat_([a-z0-9]{12})_…", 1),
)
# What no command names, replaced wherever it stands.
MASKS: tuple[tuple[str, str], ...] = (
    ("<time>", r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:\d\d)?"),
    ("<time>", r"(?<![\d:])\d\d:\d\d:\d\d\.\d{3}(?!\d)"),
    ("(<seconds>)", r"\(\d+\.\d\ds\)"),
    ("<time>…", r"\d{4}-[\d-]*…"),
    ("<time>…", r"(?<![\d.])\d\d:[\d:.]*…"),
    ("key:<key-id>…", r"key:[a-z0-9]{1,11}…"),
    # A receipts table's milliseconds, before its key column.
    ("<ms>", r"(?<=│ )\d+…?(?= +│ sh[^│]*│$)"),
    ("<uuid>", UUID),
    ("<pid>", r"(?<=│ )\d+(?= +│ (?:up|down) )"),
    ("<trace-id>", HEX32),
    ("hmac:<fingerprint>", r"hmac:[0-9a-f]{16}"),
    ("<slack-ts>", r"\d{10}\.\d{6}"),
    ("<effect-key>", r"moat-[0-9a-f]{48}"),
    ("<digest>", r"(?<=(?:; |, ))sha256:[0-9a-f]{64}"),
)
# Masks of a table's cell, after the cells before it (kept): (placeholder, lead, value).
CELLS: tuple[tuple[str, str, str], ...] = (
    # A narrow receipts table's milliseconds, its last column.
    ("<ms>", r"^│ <receipt-id[-\d]*> +│[^│\n]*│[^│\n]*│ *", r"\d+(?= │$)"),
)
# Masks that hold only after a word (the word kept): (placeholder, pattern of the value).
AFTER: tuple[tuple[str, str, str], ...] = (
    ("latency_ms", "<ms>", r"\d+"),
    ("duration_ms", "<ms>", r"\d+"),
    ("execution_duration_ms", "<ms>", r"\d+"),
    ("key_id", "<sealing-key-id>", r"c-[0-9a-f]{8}"),
    ("kid", "<kid>", r"[A-Za-z0-9_-]{10,}"),
    ("sha256", "<digest>", r"sha256:[0-9a-f]{10,}"),
    ("worker_id", "<host>", r"[A-Za-z0-9_.-]+"),
    ("signature\\(s\\) by", "<kid>", r"[A-Za-z0-9_-]{43}"),
)


def wrapped(pattern: str) -> str:
    """``pattern`` (a run of literal characters) allowing a line break between any two."""
    return BREAK.join(re.escape(c) for c in pattern)


@dataclass
class Command:
    line: str
    output: str = ""


@dataclass
class Placeholders:
    """Values seen so far, each with the placeholder that stands for it."""

    names: dict[str, str] = field(default_factory=dict)  # value -> placeholder

    def name(self, kind: str, value: str) -> str:
        if value not in self.names:
            taken = sum(1 for p in self.names.values() if re.fullmatch(rf"<{kind}(-\d+)?>", p))
            self.names[value] = f"<{kind}>" if taken == 0 else f"<{kind}-{taken + 1}>"
        return self.names[value]

    def values(self) -> dict[str, str]:
        """Placeholder -> value, for the commands."""
        return {p: v for v, p in self.names.items()}

    def learn(self, text: str) -> None:
        for kind, pattern, group in NAMED:
            for match in re.finditer(pattern, text, re.MULTILINE):
                value = match.group(group).replace("%2F", "/")
                self.name(kind, value)
                if kind == "api-key":
                    self.name("key-id", match.group(1))

    def hide(self, text: str) -> str:
        """``text`` with every value seen written as its placeholder (longest first, so a
        key's id inside the key stays part of it), then the masks."""
        for value in sorted(self.names, key=len, reverse=True):
            placeholder = self.names[value]
            forms = {value, value.replace("/", "%2F")}
            for form in forms:
                text = keep_width(text, wrapped(form), placeholder)
        for word, placeholder, pattern in AFTER:
            text = _after(text, word, placeholder, pattern)
        for placeholder, pattern in MASKS:
            text = keep_width(text, pattern, placeholder)
        for placeholder, lead, pattern in CELLS:
            text = keep_width(text, pattern, placeholder, lead)
        return text


# Words whose quoted values are long enough for a line's end to split them.
SPLIT = ("kid", "sha256")


def _after(text: str, word: str, placeholder: str, pattern: str) -> str:
    """The value after ``word`` (``word: value``, ``word │ value``, ``"word": "value"``)
    masked."""
    lead = rf"\b{word}[\"']?:?[ │┃]*(?:\n[ │┃]*)?[\"']?"
    value = rf"(?:{pattern})(?:{BREAK}[A-Za-z0-9_:-]+)*" if word in SPLIT else pattern
    return keep_width(text, value, placeholder, lead)


def keep_width(text: str, pattern: str, placeholder: str, lead: str = "") -> str:
    """Each match of ``pattern`` (after ``lead``, kept) replaced by ``placeholder``; in a
    table's cell, with as many more or fewer spaces after it as keep the columns after it
    in place."""

    def put(match: re.Match[str]) -> str:
        value, spaces = match.group("value"), match.group("spaces")
        line_start = text.rfind("\n", 0, match.start()) + 1
        in_table = text[line_start : line_start + 1] in "│┃" and line_start < len(text)
        if in_table and spaces and "\n" not in value:
            spaces = " " * max(1, len(value) + len(spaces) - len(placeholder))
        return match.group("lead") + placeholder + spaces

    found = rf"(?P<lead>{lead})(?P<value>{pattern})(?P<spaces> *)"
    return re.sub(found, put, text, flags=re.MULTILINE)


def canonical(text: str) -> str:
    """What two runs must agree on: the text, with the width of a table's columns (which
    follows the widths of the values in it) left out, and so what a cell cut short holds."""
    lines = []
    for line in text.strip("\n").splitlines():
        line = re.sub(r"[━─]+", "─", re.sub(r"[^\s│┃]*…", "…", line))
        lines.append(re.sub(r" +", " ", line).strip())
    return "\n".join(lines)


def blocks(page: str) -> list[list[Command]]:
    """The page's console blocks, each its commands with what the page says they print."""
    return [_commands(match.group(1)) for match in FENCE.finditer(page)]


def _commands(block: str) -> list[Command]:
    commands: list[Command] = []
    lines = iter(block.splitlines())
    for line in lines:
        if line.startswith("$ "):
            command = line[2:]
            while command.endswith("\\"):
                command += "\n" + next(lines)
            commands.append(Command(command))
        elif commands:
            commands[-1].output += line + "\n"
    return commands


def rewrite(page: str, outputs: Iterable[list[Command]]) -> str:
    """``page`` with each console block's outputs replaced by ``outputs``."""
    replacements = iter(outputs)

    def block(match: re.Match[str]) -> str:
        commands = next(replacements)
        body = "".join("$ " + c.line + "\n" + _printed(c.output) for c in commands)
        return "```console\n" + re.sub(r"[ \t]+$", "", body, flags=re.MULTILINE) + "```"

    return FENCE.sub(block, page)


def _printed(output: str) -> str:
    text = output.strip("\n")
    return text + "\n" if text else ""
