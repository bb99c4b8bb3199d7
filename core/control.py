"""Whether the training loop goes on: "run", "pause" or "stop", the same answer on every replica.

Like stylegan2-ada's `abort_fn` ("must return consistent results across ranks"), the loop asks
at each log step, and stops for one of three reasons: a Stop request ("stop"), the app that
started the run gone ("gone"), or replica-0-only work that failed ("failed").

    control = Control(run, rt, watch_pids)
    control.request_waiting()              # between log steps: make this step a log step?
    values = {**losses, **control.flag_tensors()}   # reduced across replicas with the losses
    control.take_agreed(reduced_values)    # once the log step's values are read
    control.decision()                     # "run" | "pause" | "stop" | "gone" | "failed"
    control.wait_while_paused()            # the decision once the pause ends

Each replica's own view of the requests and of its processes becomes flags that ride in the log
step's reduction beside the losses. Once the step's values are read, a flag any replica set is
set on all of them, so every replica stops, pauses or fails at the same step: one replica
leaving alone would leave the others waiting in their next all-reduce forever. It costs no
rendezvous of its own (xm.mesh_reduce would add syncs and all-gathers every log step).
"""
from __future__ import annotations

import os
import time

from core.rundir import pid_alive

FLAGS = ("control_failed", "control_gone", "control_pause", "control_stop")
# A single replica looks for a Stop/Pause request between log steps this often, so a button is
# heard within about a second whatever the step time (batch 512 on a CPU: ~0.3 s a step).
CONTROL_CHECK_SECONDS = 0.5
PAUSE_POLL_SECONDS = 0.2


def decide(flags: dict[str, bool]) -> str:
    """The loop's next move from the agreed flags: a failure first, then the app gone, a stop, a pause."""
    for flag, decision in (("control_failed", "failed"), ("control_gone", "gone"),
                           ("control_stop", "stop"), ("control_pause", "pause")):
        if flags[flag]:
            return decision
    return "run"


class Control:
    def __init__(self, run, rt, watch_pids=()):
        """run: the RunDir whose request file the UI and the CLI write; rt: the replica's
        core.devices.Runtime; watch_pids: processes whose end stops the run (the app, and the
        trainer of a launch worker)."""
        self.run, self.rt = run, rt
        self.watch_pids = [p for p in (watch_pids or ()) if p and p != os.getpid()]
        # The first failure of this replica's replica-0-only work (files, grids, quality): it is
        # reported through the agreement, so every replica ends the run together with it.
        self.failure = ""
        self.agreed = dict.fromkeys(FLAGS, False)
        self._last_check = 0.0

    def _own_flags(self) -> dict[str, bool]:
        """This replica's own view; only the agreed values steer the loop."""
        request = self.run.read_request()
        return {"control_failed": bool(self.failure), "control_gone": any(not pid_alive(p) for p in self.watch_pids),
                "control_pause": request == "pause", "control_stop": request == "stop"}

    def request_waiting(self) -> bool:
        """Between log steps: has a single replica been asked to stop or pause (or lost its app)?

        Only with one replica: with several, each would decide at a different step and their
        all-reduces would no longer pair up, so they wait for the log step's agreement."""
        if self.rt.world_size > 1:
            return False
        now = time.perf_counter()
        if now - self._last_check < CONTROL_CHECK_SECONDS:
            return False
        self._last_check = now
        flags = self._own_flags()
        return flags["control_stop"] or flags["control_pause"] or flags["control_gone"]

    def flag_tensors(self) -> dict:
        """This replica's flags as device scalars, to reduce with the log step's losses."""
        import torch
        flags = self._own_flags()
        # One transfer of device data (not constants baked into the graph: no recompile).
        values = torch.tensor([float(flags[k]) for k in FLAGS], device=self.rt.device)
        return {k: values[i] for i, k in enumerate(FLAGS)}

    def take_agreed(self, values: dict) -> None:
        """Take the flags out of a log step's reduced values: set here if any replica set them."""
        self.agreed = {k: values.pop(k) > 0 for k in FLAGS}

    def decision(self) -> str:
        """At a log step, once its values are read: the same answer on every replica."""
        return decide(self.agreed)

    def wait_while_paused(self) -> str:
        """Wait, agreeing every PAUSE_POLL_SECONDS, until no replica sees a pause request; then
        the decision ("run" once resumed: the request is cleared)."""
        while (decision := decide(self.rt.agree(self._own_flags()))) == "pause":
            time.sleep(PAUSE_POLL_SECONDS)
        if decision == "run":
            self.run.clear_request()
        return decision
