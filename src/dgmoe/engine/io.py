"""The engine's name for dgmoe's one atomic writer, `dgmoe.atomic` (which lives below every package that writes a
file, so that data, models and sweeps write through it too): the same functions, declared there."""
from __future__ import annotations

from dgmoe.atomic import (
                          FOLDER_SUFFIX,
                          SAFETENSORS_TEMP,
                          TEMP_GLOB,
                          atomic_folder,
                          atomic_path,
                          file_mode,
                          finite_or_null,
                          read_jsonl,
                          remove_stale_folders,
                          remove_stale_temporaries,
                          save_safetensors_atomic,
                          stale_temporaries,
                          strict_json,
                          write_bytes_atomic,
                          write_json_atomic,
                          write_jsonl_atomic,
                          write_text_atomic,
)

__all__ = ["FOLDER_SUFFIX", "SAFETENSORS_TEMP", "TEMP_GLOB", "atomic_folder", "atomic_path", "file_mode",
           "finite_or_null", "read_jsonl", "remove_stale_folders", "remove_stale_temporaries",
           "save_safetensors_atomic", "stale_temporaries", "strict_json", "write_bytes_atomic", "write_json_atomic",
           "write_jsonl_atomic", "write_text_atomic"]
