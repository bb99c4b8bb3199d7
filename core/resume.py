"""Resume: the one policy for the CLI and the page (app/job.py).

    plan, note = prepare_resume(run, 4000, given, device)   # raises ResumeRefused with what to do instead
    problem = checkpoint_problem(state, training)   # the trainer's check of the checkpoint it loads

A resume is a new plan of the run (Plan.replan: the same function and checks as a Start's), with
its new length, as it trained at its checkpoint: the host's settings changes after it (the plan's
`changes`) take effect again at their steps (core/train.py), unless the run diverged after them:
then they are dropped, and `note` says so.
"""
from __future__ import annotations

from core.config import MAX_STEPS, ConfigError
from core.failures import DIVERGED
from core.plan import Plan
from core.rundir import FINAL_STATES, RunDir, pid_alive


class ResumeRefused(ValueError):
    """A run cannot be resumed as asked; the message says why and what to do instead."""


def config_changed_message(changed: list[str]) -> str:
    return ("Cannot resume: the config changed in " + ", ".join(changed) + ". Resume with the run's own config "
            "(only steps may change), or start a new run.")


OLDER_BLINK = ("Cannot resume: this run was saved by an older Blink. Start a new run; its last generator is kept "
               "for sampling.")


def prepare_resume(run: RunDir, steps: int | None, given: dict, device, one_process: bool = False) -> tuple[Plan, str]:
    """Check that `run` can continue from its checkpoint, make it ready, write and return the plan
    it trains on with, and what the presser is told beyond "resuming" ('' or the settings changes
    it drops). Raises ResumeRefused.

    steps: the new total, more than the run has done; None keeps the run's own. given: the config
    values the caller asked for (the CLI's flags), each as the run's own or refused (only steps may
    change). device(requested): the DeviceInfo the run trains on now (the CLI probes it, the page
    keeps its probe). one_process: the CLI outside torchrun, which trains a run of several processes
    on in one. Making ready: events logged after the checkpoint go (RunDir.trim_events), and so do a
    request and a share of the CPU left from the last session."""
    try:
        plan = run.read_plan()
    except OSError:
        raise ResumeRefused(f"{run.name} is not a run folder (it has no config.json): name a run to resume.")
    except ValueError:
        raise ResumeRefused(OLDER_BLINK)
    if not run.has_checkpoint():
        raise ResumeRefused(f"Run {run.name} has no checkpoint yet, so it cannot be resumed: start a new run.")
    status = run.read_status()
    if status.state not in FINAL_STATES and pid_alive(status.pid):
        raise ResumeRefused(f"Run {run.name} is still training: stop it first.")
    try:
        changed = plan.replan(**{k: v for k, v in given.items() if k != "steps"}).config.differences(plan.config)
    except ConfigError as exc:
        raise ResumeRefused(f"Cannot resume: {exc}")
    if changed:
        raise ResumeRefused(config_changed_message(changed))
    done = status.saved_step
    total = plan.config.steps if steps is None else int(steps)
    if total <= done:
        raise ResumeRefused(f"Run {run.name} already has {done} steps: ask for more than that "
                            f"(e.g. {done + plan.config.steps}) to continue it.")
    if total > MAX_STEPS:
        raise ResumeRefused(f"At most {MAX_STEPS:,} steps.")
    try:
        found = device(plan.asked.device)
        diverged = status.state == "failed" and status.message.startswith(DIVERGED)
        resumed = plan.at_step(done, keep_later=not diverged).replan(
            found, steps=total, **({"processes": found.processes} if one_process else {}))
    except ConfigError as exc:
        raise ResumeRefused(f"Cannot resume: {exc}")
    note = ""
    dropped = [c for c in plan.changes if c["step"] > done] if diverged else []
    if dropped:
        note = (f"It goes on from step {done} with the settings of that checkpoint: the run diverged after "
                f"{changes_in_words(dropped)}, so {'that change is' if len(dropped) == 1 else 'those changes are'} "
                "dropped.")
    run.write_plan(resumed)
    run.trim_events(done)
    run.clear_request()
    run.clear_cpu_share()   # one left by an app that ended while a comparison trained beside the run
    run.remove_stale_temp_files()   # a checkpoint write killed half-way
    return resumed, note


def changes_in_words(changes: list[dict]) -> str:
    """'the change at step 45 (lr_d 0.1)', or several such, joined."""
    said = [f"the change at step {c['step']} (" + ", ".join(f"{k} {v:g}" for k, v in c["settings"].items()) + ")"
            for c in changes]
    return " and ".join(said)



def checkpoint_problem(state: dict, training) -> str | None:
    """Why the trainer cannot continue its plan from this checkpoint (None: it can). training: the
    core.training.Training built from the plan, whose nets the checkpoint's weights must fit."""
    try:
        saved = Plan.from_dict(state["plan"])
    except (KeyError, ValueError):
        return OLDER_BLINK
    changed = training.plan.differences(saved)
    built = [name for name in changed if name in ("resolution", "classes", "channels")]
    if changed != built:
        return config_changed_message([name for name in changed if name not in built])
    if built or not _weights_fit(state, training):
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
