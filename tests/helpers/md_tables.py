"""Reading a Markdown pipe table back (as `dgmoe.tables.markdown_table` writes it) for assertions."""


def table_rows(text: str) -> list[list[str]]:
    """Every row (header included, rule lines left out) of the pipe tables in `text`, cells stripped."""
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|") and not set(line) <= set("|:- ")]
