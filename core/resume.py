"""Resume: the one policy for the CLI and the page (app/job.py).

    config, note = prepare_resume(run, steps=4000)   # raises ResumeRefused with what to do instead
    problem = checkpoint_problem(state, training)   # the trainer's check of the checkpoint it loads

The host's settings changes after the checkpoint (the plan's `changes`) take effect again at their
steps (core/train.py), unless the run diverged after them: then they are dropped, and `note` says so.
"""
from __future__ import annotations

import dataclasses
import os

from core.config import LIVE_FIELDS, MAX_STEPS, TrainConfig
from core.failures import DIVERGED
from core.plan import Plan, batch_the_set_allows, resolved_for
from core.rundir import FINAL_STATES, RunDir, pid_alive


class ResumeRefused(ValueError):
    """A run cannot be resumed as asked; the message says why and what to do instead."""


def config_changed_message(changed: list[str]) -> str:
    return ("Cannot resume: the config changed in " + ", ".join(changed) + ". Resume with the run's own config "
            "(only steps may change), or start a new run.")


def prepare_resume(run: RunDir, steps: int | None = None, given: dict | None = None) -> tuple[TrainConfig, str]:
    """Check that `run` can continue from its checkpoint, make it ready, and return the config to
    train it with (its config.json with the new total of steps) and what the presser is told
    beyond "resuming" ('' or the settings changes it drops). Raises ResumeRefused.

    steps: the new total, more than the run has done; None keeps the run's own. given: the config
    values the caller asked for (the CLI's flags, the page's form). The checkpoint's weights and
    optimizer state belong to the run's own config, so any difference but steps is refused; both
    are resolved as the trainer resolved the run, so 'auto' or a default left None matches what it
    became there. Making ready: events logged after the checkpoint go (RunDir.trim_events), and so
    do a request and a share of the CPU left from the last session; the plan is written as the run
    trains on from the checkpoint (its settings then, the later changes to come or dropped).

    Asked by a rank of the trainer that holds the run (a run of several processes the page started),
    it is the same resume: that trainer's pid in the status is no other trainer."""
    try:
        plan = run.read_plan()   # None for a run saved before plans: its config alone
        saved = plan.config if plan is not None else run.read_config()
    except (OSError, ValueError):
        raise ResumeRefused(f"{run.name} is not a run folder (it has no config.json): name a run to resume.")
    if not run.has_checkpoint():
        raise ResumeRefused(f"Run {run.name} has no checkpoint yet, so it cannot be resumed: start a new run.")
    status = run.read_status()
    if status.state not in FINAL_STATES and pid_alive(status.pid) and status.pid != os.getppid():
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
    note = ""
    if plan is not None:
        diverged = status.state == "failed" and status.message.startswith(DIVERGED)
        dropped = [c for c in plan.changes if c["step"] > done] if diverged else []
        resumed = plan.at_step(done, keep_later=not diverged)
        own = dataclasses.replace(own, **{name: getattr(resumed.config, name) for name in LIVE_FIELDS})
        run.write_plan(dataclasses.replace(resumed, config=dataclasses.replace(resumed.config, steps=total)))
        if dropped:
            note = (f"It goes on from step {done} with the settings of that checkpoint: the run diverged after "
                    f"{changes_in_words(dropped)}, so {'that change is' if len(dropped) == 1 else 'those changes are'} "
                    "dropped.")
    run.trim_events(done)
    run.clear_request()
    run.clear_cpu_share()   # one left by an app that ended while a comparison trained beside the run
    run.remove_stale_temp_files()   # a checkpoint write killed half-way
    return dataclasses.replace(own, steps=total), note


def changes_in_words(changes: list[dict]) -> str:
    """'the change at step 45 (lr_d 0.1)', or several such, joined."""
    said = [f"the change at step {c['step']} (" + ", ".join(f"{k} {v:g}" for k, v in c["settings"].items()) + ")"
            for c in changes]
    return " and ".join(said)



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
        changed = plan.config.differences(resolved_for(TrainConfig.from_dict(state["config"]), plan.device.kind)[0],
                                          ignore=("steps", "processes", *LIVE_FIELDS))
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
