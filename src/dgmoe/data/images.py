"""Decoding one image file into the uint8 RGB array every dgmoe dataset stores.

Pillow's `convert("RGB")` clips 16-bit images (a grey value of 40000 of 65535 becomes 255); here 16-bit
modes are scaled to 8 bits (value / 257), 32-bit integer images are accepted when their values fit 16 bits,
float images are refused, and palette, alpha, CMYK and 1-bit images take Pillow's conversion. Every failure
(missing, truncated or corrupt file, decompression bomb) raises `UnreadableImageError` naming the file.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from PIL import Image

from dgmoe.data.errors import UnreadableImageError

SIXTEEN_BIT_MODES = ("I;16", "I;16B", "I;16L", "I;16N")


def _to_rgb(im: Image.Image, path: str | Path) -> Image.Image:
    if im.mode in SIXTEEN_BIT_MODES or im.mode == "I":
        values = np.asarray(im)
        if values.size and (values.min() < 0 or values.max() > 65535):
            raise UnreadableImageError(path, f"32-bit integer image with values in [{values.min()}, {values.max()}]; "
                                             "dgmoe reads 8- and 16-bit images: convert it to 8-bit")
        grey = np.round(values.astype(np.float64) / 257.0).astype(np.uint8)
        return Image.fromarray(grey, mode="L").convert("RGB")
    if im.mode == "F":
        raise UnreadableImageError(path, "floating-point image (Pillow mode F); convert it to 8-bit")
    return im.convert("RGB")


def read_rgb(path: str | Path, img_size: int | None) -> np.ndarray:
    """uint8 `[3, S, S]` (bilinear square resize, DomainBed's eval `Resize((S, S))`), or the native size when
    `img_size` is None."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as im:
                im = _to_rgb(im, path)
                if img_size is not None and im.size != (img_size, img_size):
                    im = im.resize((img_size, img_size), Image.Resampling.BILINEAR)
                arr = np.asarray(im, dtype=np.uint8)
    except UnreadableImageError:
        raise
    except FileNotFoundError:
        raise UnreadableImageError(path, "file not found") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise UnreadableImageError(path, f"too many pixels, possibly a decompression bomb ({e})") from None
    except Exception as e:  # PIL raises many types for truncated or corrupt files
        raise UnreadableImageError(path, f"{type(e).__name__}: {e}") from None
    return arr.transpose(2, 0, 1)
