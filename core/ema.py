"""An exponential moving average of a network's weights: what a viewer samples from.

    average = WeightAverage(G, decay=0.99)   # a copy of G on G's device
    average.update()                         # after every optimizer step of G
    average.module                           # the averaged generator: grids, quality, generator file

The average smooths out G's step-to-step swings, so what viewers see reaches digits sooner and
never dips (lab/README.md, "In the product: the EMA of G"). G itself trains as before; only what
is shown changes.
"""
from __future__ import annotations

import copy

# decay_t = min(decay, (1 + t) / (RAMP_STEPS + t)) at step t: early on the average follows G
# closely, so it is not stuck near the random init for the ~1/(1 - decay) steps a fixed decay
# would need (0.99 holds only from step 890; before that it is the ramp).
RAMP_STEPS = 10


def ramped_decay(step, decay: float):
    """The decay used at step `step` (1 for the first update), a tensor of steps: computed where
    the steps are (the device, in WeightAverage)."""
    return ((1 + step) / (RAMP_STEPS + step)).clamp(max=decay)


class WeightAverage:
    def __init__(self, model, decay: float):
        """decay: in (0, 1); the average starts as a copy of `model` at step 0."""
        import torch
        self.decay = decay
        self.module = copy.deepcopy(model).requires_grad_(False)   # same device, same memory format
        self._pairs = (list(self.module.parameters()), list(model.parameters()))
        self._buffers = (list(self.module.buffers()), list(model.buffers()))
        # The step count lives on the device and the decay is computed there (on XLA inside the
        # step's graph, the same graph every step): the update neither reads a value back to the
        # host nor sends one per step.
        device = next(model.parameters()).device
        self.step = torch.zeros((), device=device)

    def update(self) -> None:
        """One step: average <- lerp(average, model, 1 - decay_t), in place; buffers (BatchNorm's
        running statistics) are copied, the live ones being what eval-mode sampling needs."""
        import torch
        with torch.no_grad():
            self.step += 1
            weight = 1 - ramped_decay(self.step, self.decay)
            averaged, live = self._pairs
            torch._foreach_lerp_(averaged, live, [weight] * len(averaged))   # a tensor weight: no .item()
            if self._buffers[0]:
                torch._foreach_copy_(*self._buffers)

    def load(self, weights: dict, step: int) -> None:
        """Continue from saved weights (a resume) at `step`, the step they were saved at."""
        self.module.load_state_dict(weights)
        self.step.fill_(step)
