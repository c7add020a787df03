"""Host staging of device buckets for gradcomp's exchange.

gradcomp's exchange (the C++ reducers, the same the CLI runs) reads and writes host memory
and talks over Gloo. A CUDA bucket reaches it through a pinned host buffer:

1. the gradients are ready on the stream backward wrote them on: a copy stream waits for
   an event recorded there, then copies the bucket (as float32) into the bucket's pinned
   buffer, asynchronously, and records a second event;
2. the exchange thread waits for that event (``ready``: the only wait, off the training
   thread) before its reducer reads the buffer;
3. when the exchange is done, the mean is copied back into the bucket on the copy stream,
   and the hook's future is completed with the copy stream current, so that DDP's use of
   the bucket waits for the copy (``torch.futures.Future(devices=...)`` records the event).

Buffers are kept per DDP bucket index and reused across steps; one that is too small for
a rebuilt bucket is replaced. The whole bucket crosses PCIe both ways: this is the path of
the first step (DDP's dense one) and of compressors without a device implementation; the
others are compressed on the device, and only their messages (PowerSGD: its factors) and
the dense tensors cross (gradcomp/device/reducer.h, CompressionState._exchange).

``GRADCOMP_FORCE_STAGING=1`` stages CPU buckets too, through plain buffers and no streams,
so that CI (no GPU) runs this bookkeeping: the buffers, their reuse, the ready wait and the
copy back.
"""
import os
from typing import Callable, Dict, Optional, Tuple

import torch


def forced(variable: str = "GRADCOMP_FORCE_STAGING") -> bool:
    """Whether a testing switch (an environment variable) is on."""
    return os.environ.get(variable, "") not in ("", "0")


class Staging:
    """Host buffers, one per DDP bucket index, and the copies through them for one device."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._cuda = device.type == "cuda"
        if device.type not in ("cuda", "cpu"):
            raise TypeError(f"gradcomp hook: buckets on {device} are not supported (cuda or cpu)")
        self._stream = torch.cuda.Stream(device) if self._cuda else None
        self._buffers: Dict[int, torch.Tensor] = {}
        #: Buffers allocated so far (tests check that steps reuse them).
        self.allocations = 0

    @property
    def stream(self) -> Optional["torch.cuda.Stream"]:
        """The side stream gradcomp's device work and copies run on (None on the CPU)."""
        return self._stream

    def _buffer(self, index: int, numel: int) -> torch.Tensor:
        buf = self._buffers.get(index)
        if buf is None or buf.numel() < numel:
            buf = torch.empty(max(numel, 1), dtype=torch.float32, pin_memory=self._cuda)
            self._buffers[index] = buf
            self.allocations += 1
        return buf[:numel]

    def to_host(self, index: int,
                bucket: torch.Tensor) -> Tuple[torch.Tensor, Optional[Callable[[], None]]]:
        """Starts copying the bucket into its host buffer; returns the buffer and what the
        exchange thread calls before reading it."""
        host = self._buffer(index, bucket.numel())
        if not self._cuda:
            host.copy_(bucket)
            return host, None
        produced = torch.cuda.Event()
        produced.record(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._stream):
            self._stream.wait_event(produced)
            # The bucket is used on this stream too: its memory must not be reused before
            # the copy is done (DDP keeps its buckets, but a rebuild frees the old ones).
            bucket.record_stream(self._stream)
            host.copy_(bucket, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self._stream)
        return host, copied.synchronize

    def to_device(self, host: torch.Tensor, bucket: torch.Tensor, complete: Callable[[], None],
                  scale: Optional[torch.Tensor] = None) -> None:
        """Copies the mean back into the bucket (multiplied by a loss scaler's `scale`,
        which lives on the bucket's device), then calls complete() (which completes the
        hook's future) with the copy ordered before any use of the bucket."""
        if not self._cuda:
            bucket.copy_(host)
            if scale is not None:
                bucket.mul_(scale)
            complete()
            return
        with torch.cuda.stream(self._stream):
            bucket.copy_(host, non_blocking=True)
            if scale is not None:
                scale.record_stream(self._stream)
                bucket.mul_(scale)
            complete()
