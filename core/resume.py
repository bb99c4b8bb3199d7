"""Resume: the one policy for the CLI and the page (app/job.py).

    config = prepare_resume(run, steps=4000)     # raises ResumeRefused with what to do instead
    problem = checkpoint_problem(state, training)   # the trainer's check of the checkpoint it loads
"""
from __future__ import annotations

import dataclasses

from core.config import MAX_STEPS, TrainConfig
from core.plan import Plan, batch_the_set_allows, resolved_for
from core.rundir import FINAL_STATES, RunDir, pid_alive


class ResumeRefused(ValueError):
    """A run cannot be resumed as asked; the message says why and what to do instead."""


def config_changed_message(changed: list[str]) -> str:
    return ("Cannot resume: the config changed in " + ", ".join(changed) + ". Resume with the run's own config "
            "(only steps may change), or start a new run.")


def prepare_resume(run: RunDir, steps: int | None = None, given: dict | None = None) -> TrainConfig:
    """Check that `run` can continue from its checkpoint, make it ready, and return the config to
    train it with (its config.json with the new total of steps). Raises ResumeRefused.

    steps: the new total, more than the run has done; None keeps the run's own. given: the config
    values the caller asked for (the CLI's flags, the page's form). The checkpoint's weights and
    optimizer state belong to the run's own config, so any difference but steps is refused; both
    are resolved as the trainer resolved the run, so 'auto' or a default left None matches what it
    became there. Making ready: events logged after the checkpoint go (RunDir.trim_events), and so
    do a request and a share of the CPU left from the last session."""
    try:
        plan = run.read_plan()   # None for a run saved before plans: its config alone
        saved = plan.config if plan is not None else run.read_config()
    except (OSError, ValueError):
        raise ResumeRefused(f"{run.name} is not a run folder (it has no config.json): name a run to resume.")
    if not run.has_checkpoint():
        raise ResumeRefused(f"Run {run.name} has no checkpoint yet, so it cannot be resumed: start a new run.")
    status = run.read_status()
    if status.state not in FINAL_STATES and pid_alive(status.pid):
        raise ResumeRefused(f"Run {run.name} is still training: stop it first.")
    # A run saved before config.json was resolved holds 'auto' and None: resolved here as its trainer did.
    own, _ = resolved_for(saved, status.device_kind)
    wanted, _ = resolved_for(dataclasses.replace(saved, **(given or {})), status.device_kind)
    if plan is not None:   # the batch asked for, lowered for a small set as its first session lowered it
        wanted, _ = batch_the_set_allows(wanted, plan.data.size, plan.device.shards)
    changed = wanted.differences(own)
    if changed:
        raise ResumeRefused(config_changed_message(changed))
    done = status.saved_step
    total = own.steps if steps is None else int(steps)
    if total <= done:
        raise ResumeRefused(f"Run {run.name} already has {done} steps: ask for more than that "
                            f"(e.g. {done + own.steps}) to continue it.")
    if total > MAX_STEPS:
        raise ResumeRefused(f"At most {MAX_STEPS:,} steps.")
    run.trim_events(done)
    run.clear_request()
    run.clear_cpu_share()   # one left by an app that ended while a comparison trained beside the run
    run.remove_stale_temp_files()   # a checkpoint write killed half-way
    return dataclasses.replace(own, steps=total)



def checkpoint_problem(state: dict, training) -> str | None:
    """Why the trainer cannot continue its plan from this checkpoint (None: it can). training: the
    core.training.Training built from the plan, whose nets the checkpoint's weights must fit."""
    if "conditional" not in state["config"]:
        # Saved before class-conditional training existed: unconditional, with the old defaults
        # (batch 64, lr 1e-3, z 100), which no longer resolve from this config.
        return ("Cannot resume: this run was saved by an older Blink (before class-conditional training and "
                "the new defaults). Start a new run; its last generator is kept for sampling.")
    plan = training.plan
    if "plan" in state:
        changed = plan.differences(Plan.from_dict(state["plan"]))
    else:   # saved before plans: its config alone, 'auto' resolved as its trainer resolved it
        changed = plan.config.differences(resolved_for(TrainConfig.from_dict(state["config"]), plan.device.kind)[0])
    built = [name for name in changed if name in ("resolution", "classes", "channels")]
    if changed != built:
        return config_changed_message([name for name in changed if name not in built])
    if built or not _weights_fit(state, training):
        # The same config builds other shapes when Blink changed what it builds: an own-images run
        # of the fast preset trained at 64x64 before that preset trained at most 32x32.
        size = f"{training.resolution}x{training.resolution}"
        return (f"Cannot resume: this run's networks were saved at another size than this Blink builds for its "
                f"config ({size}). Start a new run; its last generator is kept for sampling.")
    return None


def _weights_fit(state: dict, training) -> bool:
    """Whether the checkpoint holds a weight of the same shape for every weight of G and D."""
    for saved, net in ((state["G"], training.G), (state["D"], training.D)):
        built = net.state_dict()
        if set(saved) != set(built) or any(tuple(saved[k].shape) != tuple(v.shape) for k, v in built.items()):
            return False
    return True
