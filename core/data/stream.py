"""The batch stream: what the trainer draws from an ImageSet's uint8 images.

resize runs once, before training (e.g. 28 -> 64 for the 64x64 DCGAN); BatchStream then gives a
replica endless fixed-shape batches of its own shard, converted to [-1, 1] on the device.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from core.data.cache import DatasetError
from core.images import to_model_range


def resize(images: torch.Tensor, resolution: int) -> torch.Tensor:
    """Resize uint8 images once (antialiased), e.g. 28 -> 64 for the seed's 64x64 DCGAN."""
    if images.shape[-1] == resolution and images.shape[-2] == resolution:
        return images
    out = []
    for chunk in images.split(2048):    # bounded memory for large sets
        if chunk.dtype == torch.uint8:
            # PyTorch's native uint8 path: 4x faster than via float (MNIST 28 -> 64: 60k images
            # in ~3 s instead of ~12 s on 2 cores), within 1 grey level of the float result.
            out.append(F.interpolate(chunk, size=(resolution, resolution), mode="bilinear",
                                     antialias=True, align_corners=False))
            continue
        x = F.interpolate(chunk.float(), size=(resolution, resolution), mode="bilinear",
                          antialias=True, align_corners=False)
        out.append(x.round().clamp(0, 255).to(torch.uint8))
    return torch.cat(out)


class BatchStream:
    """Endless batches of one replica's shard: disjoint shards, drop_last, reshuffled per epoch.

    Replica r of w takes images r, r+w, r+2w, ...; every batch has exactly batch_size images,
    so the step's graph never changes shape. On CUDA the whole uint8 set is moved to the GPU
    once (MNIST: 47 MB), so a batch is an index on the device and the GPU never waits.
    """

    def __init__(self, images: torch.Tensor, batch_size: int, device, rank: int = 0, world_size: int = 1,
                 seed: int = 0, keep_on_device: bool = False, labels: torch.Tensor | None = None):
        shard = images[rank::world_size]
        if len(shard) < batch_size:
            raise DatasetError(f"Each replica needs at least one full batch: {len(shard)} images per replica "
                               f"< batch size {batch_size}. Use a smaller batch size.")
        self.device = torch.device(device) if isinstance(device, str) else device
        self.keep_on_device = keep_on_device
        self.shard = shard.to(self.device) if keep_on_device else shard.contiguous()
        # Class labels travel with their images (a class-conditional GAN needs them).
        self.labels = None if labels is None else labels[rank::world_size].to(self.shard.device)
        self.batch_size = batch_size
        self.batches_per_epoch = len(shard) // batch_size
        self.generator = torch.Generator().manual_seed(seed * 1000 + rank)
        self.epoch = 0
        self._order = None
        self._position = self.batches_per_epoch   # forces a shuffle on first use

    def __iter__(self):
        return self

    def __next__(self) -> torch.Tensor:
        return self.next_with_labels()[0]

    def next_with_labels(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(images in [-1, 1], their labels or None) of the next batch."""
        if self._position >= self.batches_per_epoch:
            self._order = torch.randperm(len(self.shard), generator=self.generator)
            self._position = 0
            self.epoch += 1
        idx = self._order[self._position * self.batch_size:(self._position + 1) * self.batch_size]
        self._position += 1
        if self.keep_on_device:
            idx = idx.to(self.device)
            labels = None if self.labels is None else self.labels[idx]
            return to_model_range(self.shard[idx]), labels
        labels = None if self.labels is None else self.labels[idx].to(self.device, non_blocking=True)
        # uint8 crosses to the device (4x fewer bytes than float); conversion runs there.
        return to_model_range(self.shard[idx].to(self.device, non_blocking=True)), labels
