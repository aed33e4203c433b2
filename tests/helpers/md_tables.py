"""Reading a Markdown pipe table back (as `dgmoe.tables.markdown_table` writes it) for assertions."""
import re


def table_rows(text: str) -> list[list[str]]:
    """Every row (header included, rule lines left out) of the pipe tables in `text`, cells stripped."""
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|") and not set(line) <= set("|:- ")]


def table_cells(line: str) -> list[str]:
    """The cells of one row of a pipe table as the text they show (an escaped `\\|` read back as `|`)."""
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner)]
