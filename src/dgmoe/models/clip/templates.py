"""Prompt templates for CLIP's zero-shot and text-initialised heads: a template is a `str.format` pattern with one
`{}` for the class name (`dgmoe.data.class_names`).

- `openai_imagenet`: the 80 ImageNet templates of CLIP's prompt ensemble (Radford et al., ICML 2021, §3.1.4;
  OpenAI's `Prompt_Engineering_for_ImageNet.ipynb`, the list open_clip ships as `OPENAI_IMAGENET_TEMPLATES`);
- `domainbed`: CLIP's default single prompt "A photo of a {label}." (Radford et al., §3.1.4), the prompt of the
  DomainBed zero-shot rows;
- a file: one template per line (blank lines and lines starting with '#' skipped), each with one `{}`.
"""
from __future__ import annotations

from pathlib import Path

from dgmoe.errors import UsageError

OPENAI_IMAGENET = (
    'a bad photo of a {}.', 'a photo of many {}.', 'a sculpture of a {}.', 'a photo of the hard to see {}.',
    'a low resolution photo of the {}.', 'a rendering of a {}.', 'graffiti of a {}.', 'a bad photo of the {}.',
    'a cropped photo of the {}.', 'a tattoo of a {}.', 'the embroidered {}.', 'a photo of a hard to see {}.',
    'a bright photo of a {}.', 'a photo of a clean {}.', 'a photo of a dirty {}.', 'a dark photo of the {}.',
    'a drawing of a {}.', 'a photo of my {}.', 'the plastic {}.', 'a photo of the cool {}.',
    'a close-up photo of a {}.', 'a black and white photo of the {}.', 'a painting of the {}.',
    'a painting of a {}.', 'a pixelated photo of the {}.', 'a sculpture of the {}.', 'a bright photo of the {}.',
    'a cropped photo of a {}.', 'a plastic {}.', 'a photo of the dirty {}.', 'a jpeg corrupted photo of a {}.',
    'a blurry photo of the {}.', 'a photo of the {}.', 'a good photo of the {}.', 'a rendering of the {}.',
    'a {} in a video game.', 'a photo of one {}.', 'a doodle of a {}.', 'a close-up photo of the {}.',
    'a photo of a {}.', 'the origami {}.', 'the {} in a video game.', 'a sketch of a {}.', 'a doodle of the {}.',
    'a origami {}.', 'a low resolution photo of a {}.', 'the toy {}.', 'a rendition of the {}.',
    'a photo of the clean {}.', 'a photo of a large {}.', 'a rendition of a {}.', 'a photo of a nice {}.',
    'a photo of a weird {}.', 'a blurry photo of a {}.', 'a cartoon {}.', 'art of a {}.', 'a sketch of the {}.',
    'a embroidered {}.', 'a pixelated photo of a {}.', 'itap of the {}.', 'a jpeg corrupted photo of the {}.',
    'a good photo of a {}.', 'a plushie {}.', 'a photo of the nice {}.', 'a photo of the small {}.',
    'a photo of the weird {}.', 'the cartoon {}.', 'art of the {}.', 'a drawing of the {}.',
    'a photo of the large {}.', 'a black and white photo of a {}.', 'the plushie {}.', 'a dark photo of a {}.',
    'itap of a {}.', 'graffiti of the {}.', 'a toy {}.', 'itap of my {}.', 'a photo of a cool {}.',
    'a photo of a small {}.', 'a tattoo of the {}.',
)
DOMAINBED = ("a photo of a {}.",)
TEMPLATE_SETS: dict[str, tuple[str, ...]] = {"openai_imagenet": OPENAI_IMAGENET, "domainbed": DOMAINBED}


def _check(template: str, where: str) -> str:
    if template.count("{}") != 1 or template.replace("{}", "").count("{") or template.replace("{}", "").count("}"):
        raise UsageError(f"{where}: a template needs exactly one {{}} for the class name (and no other braces), "
                         f"got {template!r}")
    return template


def templates(source: str) -> tuple[str, ...]:
    """The templates of a set name (`TEMPLATE_SETS`) or of a file, one per line; a one-line `UsageError` names a
    missing file or a template without exactly one `{}`."""
    if source in TEMPLATE_SETS:
        return TEMPLATE_SETS[source]
    path = Path(source)
    if not path.is_file():
        raise UsageError(f"--prompt-templates {source}: neither a template set ({', '.join(TEMPLATE_SETS)}) nor a file")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--prompt-templates {source}: cannot read it as UTF-8 text ({type(e).__name__})") from None
    found = tuple(_check(line.strip(), f"--prompt-templates {source}:{n}") for n, line in enumerate(lines, 1)
                  if line.strip() and not line.lstrip().startswith("#"))
    if not found:
        raise UsageError(f"--prompt-templates {source}: no template in the file (one per line, each with one {{}})")
    return found
