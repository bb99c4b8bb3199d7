"""The batch stream: what the trainer draws from an ImageSet's uint8 images.

resize runs once, before training (e.g. 28 -> 64 for the 64x64 DCGAN), and resized keeps its result in
the cache; BatchStream then gives endless fixed-shape batches, converted to [-1, 1] on the device.
"""
from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn.functional as F

from core.data.cache import DatasetError, file_lock
from core.data.tensors import ImageSet, load_cached, save_cached
from core.images import to_model_range


def resized(image_set, resolution: int, progress=None) -> torch.Tensor:
    """The set's images at `resolution`, the same values as resize(): resized once, then kept beside
    its decoded file in the cache and memory-mapped from there, so a run's next session (a ZeroGPU
    chunk, a resume) reads them instead of resizing again. A set kept nowhere (the bundled MNIST,
    small) is resized each time. progress(done, total) as images are resized."""
    images = image_set.images
    if images.shape[-1] == resolution and images.shape[-2] == resolution:
        return images
    if not image_set.cache_path:
        return resize(images, resolution, progress)
    path = image_set.cache_path[:-3] + f"-{resolution}px.pt"
    with contextlib.ExitStack() as stack:
        with contextlib.suppress(OSError):         # a read-only cache only costs the resize next time
            stack.enter_context(file_lock(path))   # one process resizes, the others then read its file
        cached = load_cached(path, image_set.name)
        if cached is not None and cached.images.shape == (len(images), images.shape[1], resolution, resolution):
            return cached.images
        out = resize(images, resolution, progress)
        with contextlib.suppress(OSError):         # a full or read-only cache only costs the resize next time
            save_cached(path, ImageSet(out, image_set.name))   # the labels stay in the decoded file
        return out


def resize(images: torch.Tensor, resolution: int, progress=None) -> torch.Tensor:
    """Resize uint8 images once (antialiased), e.g. 28 -> 64 for the seed's 64x64 DCGAN.
    progress(done, total): before each chunk of images and once at the end."""
    if images.shape[-1] == resolution and images.shape[-2] == resolution:
        return images
    out = []
    for chunk in images.split(2048):    # bounded memory for large sets
        if progress is not None:
            progress(sum(len(part) for part in out), len(images))
        # uint8 stays uint8: PyTorch's native path, several times faster than via float, within 1 grey level.
        native = chunk.dtype == torch.uint8
        x = F.interpolate(chunk if native else chunk.float(), size=(resolution, resolution), mode="bilinear",
                          antialias=True, align_corners=False)
        out.append(x if native else x.round().clamp(0, 255).to(torch.uint8))
    if progress is not None:
        progress(len(images), len(images))
    return torch.cat(out)


class BatchStream:
    """Endless batches of exactly batch_size images (the step's graph never changes shape): drop_last,
    reshuffled each epoch, from a seed. With keep_on_device (CUDA) the uint8 set and its order live
    on the GPU, so a batch is a gather there, with no host synchronisation inside a step. Otherwise a
    batch is cut on the host and sent with `place` (Runtime.to_device: under SPMD each device gets its
    share); with prefetch the next one is cut and sent in a thread while the step runs. state() says
    where the batches handed out so far leave the stream, not the one waiting."""

    def __init__(self, images: torch.Tensor, batch_size: int, device, seed: int = 0,
                 keep_on_device: bool = False, labels: torch.Tensor | None = None, place=None,
                 prefetch: bool | None = None, rows=None):
        """rows: which of a batch's images this process takes (the trainer's Runtime.local_part: under
        DDP a block of batch / N); the order, and state(), stay the whole batch's, alike in every
        process, so a checkpoint continues with any number of them."""
        if len(images) < batch_size:
            raise DatasetError(f"The dataset has {len(images)} images, fewer than one batch of {batch_size}: "
                               "use a smaller batch size.")
        self.device = torch.device(device) if isinstance(device, str) else device
        self.keep_on_device = keep_on_device
        self.images = images.to(self.device) if keep_on_device else images.contiguous()
        # Class labels travel with their images (a class-conditional GAN needs them).
        self.labels = None if labels is None else labels.to(self.images.device)
        self.place = place or (lambda tensor: tensor.to(self.device, non_blocking=True))
        self.rows = rows or (lambda indices: indices)
        self.batch_size = batch_size
        self.batches_per_epoch = len(images) // batch_size
        # The order is drawn where the images are (a CUDA generator for a set on the GPU).
        self.generator = torch.Generator(device=self.images.device).manual_seed(seed * 1000)
        self.epoch = 0
        self.last_batch = None
        self._order = None
        self._position = self.batches_per_epoch   # forces a shuffle on first use
        # A batch "sent" to the CPU is the cut itself, and a set on the GPU is cut there: only a
        # send to another device is host work that can run beside the step. On the CPU the thread
        # would only take cores from the step's own threads.
        self.prefetch = (not keep_on_device and self.device.type != "cpu") if prefetch is None else prefetch
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="blink-batches") if self.prefetch else None
        self._pending = None   # (the next batch's future, state() before it was drawn)

    def state(self) -> dict:
        """Where the stream is: this epoch's order, the next batch in it, the shuffler's state."""
        return self._pending[1] if self._pending else self._state()

    def _state(self) -> dict:
        return {"epoch": self.epoch, "position": self._position, "generator": self.generator.get_state(),
                "order": None if self._order is None else self._order.cpu()}

    def load_state(self, state: dict) -> None:
        """Go on from state(): the batches that follow are the ones an unbroken run would draw."""
        self._pending = None   # a batch drawn ahead belongs to the old position
        self.epoch, self._position = state["epoch"], state["position"]
        self.generator.set_state(state["generator"])
        self._order = None if state["order"] is None else state["order"].to(self.images.device)

    def __iter__(self):
        return self

    def __next__(self) -> torch.Tensor:
        return self.next_with_labels()[0]

    def next_with_labels(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(images in [-1, 1], their labels or None) of the next batch."""
        if self.keep_on_device:
            idx = self._next_indices()
            self.last_batch = self.images[idx]
            return to_model_range(self.last_batch), None if self.labels is None else self.labels[idx]
        if self.prefetch:
            if self._pending is None:
                self._pending = self._draw_ahead()
            ready = self._pending[0]
            self._pending = self._draw_ahead()   # queued behind this one: the thread goes straight on to it
            images, labels = ready.result()
        else:
            images, labels = self._cut(self._next_indices())
        self.last_batch = images   # kept for the status: how it was split over devices
        return to_model_range(images), labels

    def _next_indices(self) -> torch.Tensor:
        if self._position >= self.batches_per_epoch:
            self._order = torch.randperm(len(self.images), generator=self.generator, device=self.images.device)
            self._position = 0
            self.epoch += 1
        idx = self._order[self._position * self.batch_size:(self._position + 1) * self.batch_size]
        self._position += 1
        return self.rows(idx)

    def _cut(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        # uint8 crosses to the device (4x fewer bytes than float); conversion runs there.
        return self.place(self.images[idx]), None if self.labels is None else self.place(self.labels[idx])

    def _draw_ahead(self):
        """The next batch's indices, drawn here (the shuffle stays in order), cut and sent in the thread."""
        before = self._state()
        return self._worker.submit(self._cut, self._next_indices()), before
