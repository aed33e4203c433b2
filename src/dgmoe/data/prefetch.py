"""The next steps' batches built in a background thread while the device trains on this one.

On a GPU the step loop is a race between two producers of device work on one host: the training step's
kernel launches and the loader's (gathering uint8 items into pinned memory, copying them to the device and
augmenting them there). Run one after the other on the main thread, their host times add up, and the GPU
waits whenever their sum exceeds its step time. `BackgroundBatches` runs the loader in a thread, `depth`
steps ahead, on its own CUDA stream: the copies and augmentation kernels overlap the step's kernels, and
the host work of both overlaps too (torch releases the GIL while it runs an operation). The main thread
makes its stream wait for an event recorded after each batch, and marks the batch's tensors as used on its
stream, so the caching allocator never hands their memory to the loader's stream before the step is done.

The batches are exactly the iterator's: the same items in the same order; only where they are built moves.
Errors raised by the iterator are raised by `next()` in the consumer, at the step they belong to.
"""
from __future__ import annotations

import contextlib
import queue
import threading
from typing import Any, Iterator

import torch

from dgmoe.data.base import Batch

_DONE = object()


def _tensors(item: Any) -> Iterator[torch.Tensor]:
    """Every tensor in a step's batches (a list of `Batch`es, or nested tuples/lists/dicts of tensors)."""
    if isinstance(item, torch.Tensor):
        yield item
    elif isinstance(item, Batch):
        yield from _tensors([item.x, item.y, item.meta, item.shard])
    elif isinstance(item, dict):
        for v in item.values():
            yield from _tensors(v)
    elif isinstance(item, (list, tuple)):
        for v in item:
            yield from _tensors(v)


class BackgroundBatches(Iterator[Any]):
    """Iterate `source` in a daemon thread, at most `depth` items ahead, on a side stream on CUDA.

    Use as an iterator and `close()` it (or use it as a context manager) when done early: the thread stops
    after its current item. `device`: where the items' tensors live (a side stream is used on CUDA only).
    """

    def __init__(self, source: Iterator[Any], device: torch.device | str | None = None, depth: int = 2):
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self._cuda = self.device.type == "cuda"
        self._stream = torch.cuda.Stream(self.device) if self._cuda else None
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._finished = False
        self._thread = threading.Thread(target=self._produce, args=(source,), name="dgmoe-batches", daemon=True)
        self._thread.start()

    def _produce(self, source: Iterator[Any]) -> None:
        stream = torch.cuda.stream(self._stream) if self._stream is not None else contextlib.nullcontext()
        try:
            if self._cuda and self.device.index is not None:
                torch.cuda.set_device(self.device)  # a thread starts on cuda:0 (torchrun's other ranks use others)
            with stream:
                for item in source:
                    event = None
                    if self._stream is not None:
                        event = torch.cuda.Event()
                        event.record(self._stream)
                    if not self._put((item, event, None)):
                        return
        except BaseException as e:  # handed to the consumer, raised at the step it belongs to
            self._put((None, None, e))
            return
        self._put((_DONE, None, None))

    def _put(self, entry: tuple) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> "BackgroundBatches":
        return self

    def __next__(self) -> Any:
        if self._finished:
            raise StopIteration
        item, event, error = self._queue.get()
        if error is not None:
            self.close()
            raise error
        if item is _DONE:
            self.close()
            raise StopIteration
        if event is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(event)
            for t in _tensors(item):
                if t.device.type == "cuda":
                    t.record_stream(current)
        return item

    def close(self) -> None:
        """Stop the thread (after the item it is building) and drop what it built ahead."""
        self._finished = True
        self._stop.set()
        with contextlib.suppress(queue.Empty):
            while True:
                self._queue.get_nowait()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def __enter__(self) -> "BackgroundBatches":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
