"""CLIP's tokenizer (Radford et al., ICML 2021, §2.4: "a lower-cased byte pair encoding (BPE) representation of
the text with a 49,152 vocab size", sequences of 76 tokens plus the start token, bracketed by [SOS] and [EOS]),
offline: the BPE merges ship with dgmoe (`vocab/bpe_simple_vocab_16e6.txt.gz`, OpenAI's file, MIT licence
beside it), and the ids equal open_clip's `SimpleTokenizer` (`tests/parity/fixtures/clip_tokens.json`).

The steps, as open_clip's default `clean='lower'`:
1. cleaning (`clean_text`): ftfy's `fix_text` without its mojibake repair (see below), HTML entities decoded
   (twice more, as `html.unescape(html.unescape(...))`), runs of whitespace to one space, lower-cased;
2. pre-tokenisation (`_pieces`): the special tokens, the contractions 's 't 're 've 'm 'll 'd, runs of letters
   (Unicode L*), single digits (Unicode N*), runs of anything else but whitespace;
3. each piece as UTF-8 bytes mapped to printable characters (GPT-2's byte alphabet), the last marked `</w>`,
   merged by the ranked BPE merges; ids: the 256 byte symbols, the same with `</w>`, the 48,894 merges, then
   `<start_of_text>` 49406 and `<end_of_text>` 49407 (49,408 ids);
4. `[SOT] ids [EOT]`, zero-padded to the context (77); longer text is cut to 77 with [EOT] last.

ftfy's fixes applied here: HTML entities ending in ';' (lines without '<', to a fixed point), C1 controls read as
Windows-1252, Latin ligatures and digraphs split, full/half-width forms to normal width, curly quotes
straightened, terminal escapes and control characters removed, NFC. Not applied: ftfy's mojibake repair
(`fix_encoding`: text decoded in the wrong encoding, e.g. "Ã©" for "é") and its upper-case entity names
("&EACUTE;"); text with those tokenises differently from open_clip (docs/design.md, CLIP's text tower).
"""
from __future__ import annotations

import gzip
import html
import re
import unicodedata
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import torch

VOCAB_FILE = Path(__file__).with_name("vocab") / "bpe_simple_vocab_16e6.txt.gz"
CONTEXT_LENGTH = 77
N_MERGES = 49152 - 256 - 2  # the merges CLIP uses: the vocabulary is 49,408 with the bytes and two specials
SOT, EOT = "<start_of_text>", "<end_of_text>"
CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")

# ----- cleaning: ftfy's fix_text without mojibake repair, then open_clip's basic/whitespace clean -----------
_ENTITY = re.compile(r"&#?[0-9A-Za-z]{1,24};")
_ANSI = re.compile("\033\\[((?:\\d|;)*)([a-zA-Z])")
_C1 = re.compile("[\x80-\x9f]")
_SINGLE_QUOTES = re.compile("[\u02bc\u2018-\u201b]")
_DOUBLE_QUOTES = re.compile("[\u201c-\u201f]")
#: Latin typographic ligatures and legacy digraphs, split (ftfy keeps "ſt" for U+FB05, NFKC would give "st")
_LIGATURES = {0x132: "IJ", 0x133: "ij", 0x149: "\u02bcn", 0x1F1: "DZ", 0x1F2: "Dz", 0x1F3: "dz", 0x1C4: "D\u017d",
              0x1C5: "D\u017e", 0x1C6: "d\u017e", 0x1C7: "LJ", 0x1C8: "Lj", 0x1C9: "lj", 0x1CA: "NJ", 0x1CB: "Nj",
              0x1CC: "nj", 0xFB00: "ff", 0xFB01: "fi", 0xFB02: "fl", 0xFB03: "ffi", 0xFB04: "ffl",
              0xFB05: "\u017ft", 0xFB06: "st"}
#: the ideographic space and the half/full-width forms block, to their normal-width characters
_WIDTH = {0x3000: " ", **{i: unicodedata.normalize("NFKC", chr(i)) for i in range(0xFF01, 0xFFF0)
                          if unicodedata.normalize("NFKC", chr(i)) != chr(i)}}
#: control characters that are never meant (C0 but tab and line breaks, DEL, deprecated format characters,
#: the byte-order mark, interlinear annotation marks)
_CONTROLS = dict.fromkeys([*range(0x00, 0x09), 0x0B, *range(0x0E, 0x20), 0x7F, *range(0x206A, 0x2070), 0xFEFF,
                           *range(0xFFF9, 0xFFFD)])
_LINE_BREAKS = re.compile("\r\n|\r|\u2028|\u2029|\u0085")


def _entity(match: re.Match[str]) -> str:
    text = match.group(0)
    decoded = html.unescape(text)
    # html.unescape also decodes a prefix without ';' ("&notit;" -> "¬it;"): only whole named entities count
    return decoded if decoded != text and not decoded.endswith(";") else text


def _c1(match: re.Match[str]) -> str:
    try:
        return match.group(0).encode("latin-1").decode("windows-1252")
    except UnicodeDecodeError:  # the five bytes Windows-1252 leaves undefined stay as they are
        return match.group(0)


def _fix_segment(text: str, entities: bool) -> str:
    while True:
        before = text
        if entities:
            text = _ENTITY.sub(_entity, text)
        text = _C1.sub(_c1, text).translate(_LIGATURES).translate(_WIDTH)
        text = _SINGLE_QUOTES.sub("'", _DOUBLE_QUOTES.sub('"', text))
        text = _LINE_BREAKS.sub("\n", text)
        text = _ANSI.sub("", text).translate(_CONTROLS)
        text = unicodedata.normalize("NFC", text)
        if text == before:
            return text


def fix_text(text: str) -> str:
    """ftfy's `fix_text` for text that is not mojibake: line by line, entities decoded until a line with '<'."""
    out, entities = [], True
    parts = text.split("\n")  # ftfy's segments end at "\n" only
    for line in [p + "\n" for p in parts[:-1]] + parts[-1:]:
        entities = entities and "<" not in line
        out.append(_fix_segment(line, entities))
    return "".join(out)


def clean_text(text: str) -> str:
    """open_clip's `clean='lower'`: `whitespace_clean(basic_clean(text)).lower()`."""
    text = html.unescape(html.unescape(fix_text(text))).strip()
    return " ".join(text.split()).lower()


# ----- pre-tokenisation ----------------------------------------------------------------------------------
def _kind(char: str) -> str:
    """'L' a letter (Unicode L*), 'N' a number (N*), ' ' whitespace, '' anything else."""
    if char.isspace():
        return " "
    category = unicodedata.category(char)[0]
    return category if category in "LN" else ""


def _pieces(text: str) -> list[str]:
    """CLIP's pattern `<start_of_text>|<end_of_text>|'s|'t|'re|'ve|'m|'ll|'d|\\p{L}+|\\p{N}|[^\\s\\p{L}\\p{N}]+`
    (case-insensitive; `text` is lower-cased already), tried in that order at each position; whitespace between
    pieces is dropped."""
    out, i, n = [], 0, len(text)
    while i < n:
        special = next((s for s in (SOT, EOT) if text.startswith(s, i)), None)
        contraction = next((c for c in CONTRACTIONS if text.startswith(c, i)), None)
        kind = _kind(text[i])
        if special or contraction:
            end = i + len(special or contraction or "")
        elif kind == "L":
            end = i + 1
            while end < n and _kind(text[end]) == "L":
                end += 1
        elif kind == "N":
            end = i + 1
        elif kind == "":
            end = i + 1
            while end < n and _kind(text[end]) == "":
                end += 1
        else:
            i += 1
            continue
        out.append(text[i:end])
        i = end
    return out


# ----- byte-pair encoding -----------------------------------------------------------------------------
def _byte_alphabet() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map: the printable Latin-1 bytes map to themselves, the
    other 68 bytes to U+0100 onwards, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + k) for k, b in enumerate(others)}}


class ClipTokenizer:
    """CLIP's BPE tokenizer; `tokenizer(texts)` -> [len(texts), context_length] int64 ids, as open_clip's."""

    def __init__(self, vocab_file: str | Path = VOCAB_FILE, context_length: int = CONTEXT_LENGTH):
        with gzip.open(vocab_file, "rt", encoding="utf-8") as f:
            lines = f.read().split("\n")[1:N_MERGES + 1]  # the first line is the file's version
        merges = [tuple(line.split()) for line in lines]
        self.bytes = _byte_alphabet()
        symbols = list(self.bytes.values())
        vocab = symbols + [s + "</w>" for s in symbols] + ["".join(m) for m in merges] + [SOT, EOT]
        self.ids = {token: i for i, token in enumerate(vocab)}
        self.tokens = vocab
        self.ranks = {m: r for r, m in enumerate(merges)}
        self.sot_id, self.eot_id = self.ids[SOT], self.ids[EOT]
        self.context_length = context_length
        self._cache: dict[str, list[str]] = {}

    @property
    def vocab_size(self) -> int:
        return len(self.ids)

    def _merge(self, piece: str) -> list[str]:
        """`piece` (byte symbols) merged by the ranked merges: the best-ranked adjacent pair, every occurrence
        left to right, until no adjacent pair is a merge."""
        if piece in self._cache:
            return self._cache[piece]
        symbols = [*piece[:-1], piece[-1] + "</w>"]
        while len(symbols) > 1:
            best = min(zip(symbols, symbols[1:]), key=lambda pair: self.ranks.get(pair, N_MERGES))
            if best not in self.ranks:
                break
            merged: list[str] = []
            i = 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    merged.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        self._cache[piece] = symbols
        return symbols

    def encode(self, text: str) -> list[int]:
        """The ids of `text` after cleaning, without [SOT]/[EOT]."""
        ids: list[int] = []
        for piece in _pieces(clean_text(text)):
            if piece in (SOT, EOT):
                ids.append(self.ids[piece])
                continue
            ids.extend(self.ids[s] for s in self._merge("".join(self.bytes[b] for b in piece.encode("utf-8"))))
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """The cleaned text of `ids` (special tokens left out; pieces separated by a space as `</w>` says)."""
        inverse = {c: b for b, c in self.bytes.items()}
        text = "".join(self.tokens[i] for i in ids if i not in (self.sot_id, self.eot_id)).replace("</w>", " ")
        return bytearray(ord(" ") if c == " " else inverse[c] for c in text).decode("utf-8", "replace").strip()

    def __call__(self, texts: str | Sequence[str], context_length: int | None = None) -> torch.Tensor:
        length = context_length or self.context_length
        texts = [texts] if isinstance(texts, str) else list(texts)
        out = torch.zeros(len(texts), length, dtype=torch.long)
        for row, text in enumerate(texts):
            ids = [self.sot_id, *self.encode(text), self.eot_id]
            if len(ids) > length:
                ids = ids[:length]
                ids[-1] = self.eot_id
            out[row, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        return out


@lru_cache(maxsize=1)
def clip_tokenizer() -> ClipTokenizer:
    """The shipped tokenizer (read once per process)."""
    return ClipTokenizer()
