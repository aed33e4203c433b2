"""A run's `--label` is one line of text that shows what it holds: control characters and the invisible format
characters of Unicode category Cf (U+202E RIGHT-TO-LEFT OVERRIDE, zero-width spaces and joiners, the bidirectional
isolates) are refused in one line; a label written before they were refused is shown with them escaped."""
from __future__ import annotations

import unicodedata

import pytest

from dgmoe.document import Table
from dgmoe.engine.config import RunConfig
from dgmoe.errors import UsageError
from dgmoe.tables import one_line, unfit_for_a_label

FORMAT_CHARACTERS = ["\u202e", "\u202d", "\u2066", "\u2069", "\u200b", "\u200d", "\u200e", "\ufeff", "\u00ad"]


@pytest.mark.parametrize("char", FORMAT_CHARACTERS, ids=[f"U+{ord(c):04X}" for c in FORMAT_CHARACTERS])
def test_a_label_with_a_format_character_is_refused_naming_it(char):
    assert unicodedata.category(char) == "Cf"
    with pytest.raises(UsageError) as info:
        RunConfig.from_flat(label=f"ERM{char}lr=1e-4")
    message = str(info.value)
    assert f"U+{ord(char):04X} ({unicodedata.name(char)})" in message and "--label" in message
    assert "\n" not in message and char not in message  # (the message itself shows no invisible character)


def test_printable_labels_from_any_script_stay_accepted():
    for label in ("ERM lr=1e-4", "ERM (ViT-S/16) λ=0.1", "基线", "مرجع", "R&D 100% | x"):
        assert unfit_for_a_label(label) is None
        assert RunConfig.from_flat(label=label).execution.label == label


def test_control_characters_are_still_refused_as_control_characters():
    with pytest.raises(UsageError, match=r"holds the control character '\\x1b'"):
        RunConfig.from_flat(label="ERM\x1b[31m")


def test_a_recorded_label_with_a_format_character_is_shown_escaped_in_every_table_format():
    label = "ERM \u202e4-e1=rl"
    assert one_line(label) == "ERM \\u202e4-e1=rl"
    table = Table.make("PACS", ["method", "A"], [[label, 70.0]])
    assert all("\u202e" not in text for text in (table.markdown(), table.latex(), table.html()))
    assert "ERM \\u202e4-e1=rl" in table.markdown()
