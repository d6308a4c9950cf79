"""How the first hour's transcript is read and made general (tests/docs/transcript.py),
without a stack: the page reads back as written, placeholders are numbered by kind in the
order values appear, and a table keeps its columns where a value is replaced."""

from __future__ import annotations

from tests.docs import transcript
from tests.support.stack import repo_root

RECEIPT = "01a21a7d-0cc7-7ce7-87e9-abe5120d9b60"
OTHER = "01a21a80-42f5-7173-842e-e7eab410cfc9"


def test_the_page_reads_back_as_written() -> None:
    page = (repo_root() / "docs" / "first-hour.md").read_text()
    blocks = transcript.blocks(page)
    assert sum(len(b) for b in blocks) >= 20
    assert transcript.rewrite(page, blocks) == page
    # A command continued on the next line is one command.
    [connection] = [c for b in blocks for c in b if c.line.startswith("echo xoxb")]
    assert "\\\n    --config" in connection.line


def test_values_are_numbered_by_kind_and_named_again_the_same() -> None:
    names = transcript.Placeholders()
    first = f"executed  {RECEIPT}  (0.70s)\n"
    second = f"executed  {OTHER}  (0.36s)\n"
    names.learn(first)
    names.learn(second)
    assert names.hide(first) == "executed  <receipt-id>  (<seconds>)\n"
    assert names.hide(second) == "executed  <receipt-id-2>  (<seconds>)\n"
    assert names.values()["<receipt-id-2>"] == OTHER


def test_a_cell_keeps_its_width_and_a_split_value_is_found() -> None:
    names = transcript.Placeholders()
    names.learn(f"executed  {RECEIPT}  (0.70s)\n")
    table = f"│ id     │ {RECEIPT} │\n│ status │ success{' ' * 29} │\n"
    hidden = names.hide(table).splitlines()
    assert hidden[0] == "│ id     │ <receipt-id>" + " " * 25 + "│"
    assert len(hidden[0]) == len(hidden[1])
    split = f"│ run │ {RECEIPT[:20]} │\n│     │ {RECEIPT[20:]} │\n"
    assert "<receipt-id>" in names.hide(split)


def test_column_widths_do_not_count() -> None:
    one = "┏━━━━┳━━━━━━┓\n┃ ms ┃ key  ┃\n│ 9  │ sha… │\n"
    other = "┏━━━━━━┳━━━━━┓\n┃ ms   ┃ key ┃\n│ 1234 │ s… │\n"
    assert transcript.canonical(one).replace("9", "1234") == transcript.canonical(other)


def test_a_narrow_receipts_tables_milliseconds_are_masked() -> None:
    names = transcript.Placeholders()
    names.name("receipt-id", "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b")
    row = "│ 0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b │ demo.echo │ success │  152 │"
    masked = "│ <receipt-id>                         │ demo.echo │ success │  <ms> │"
    assert names.hide(row) == masked
