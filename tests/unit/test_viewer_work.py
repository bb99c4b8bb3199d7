"""The viewer-work processes: the work runs in other processes, behind the trainer, a lane each for looks and
for files, and survives a crash."""
import os
import shutil

import gradio as gr
import pytest

from app import sample_work, viewer_work


@pytest.fixture()
def pool():
    yield
    viewer_work.shutdown()


def test_work_runs_in_another_process_behind_the_trainer_a_worker_a_lane(pool, tmp_path):
    assert viewer_work.run(os.getpid) != os.getpid()
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    assert viewer_work.run(os.getpriority, os.PRIO_PROCESS, 0) == min(19, ours + viewer_work.HEAVY_NICE)
    quick = viewer_work._get_pool(viewer_work.QUICK).submit(os.getpriority, os.PRIO_PROCESS, 0).result()
    assert quick == min(19, ours + viewer_work.QUICK_NICE)
    # A look at the generator goes to the quick lane's worker, a file to make to the heavy lane's.
    from PIL import Image
    Image.new("L", (4, 4)).save(tmp_path / "grid.png")
    assert viewer_work.run(sample_work.read_png, str(tmp_path / "grid.png")).shape[:2] == (4, 4)
    workers = {lane: pool._processes for lane, pool in viewer_work._pools.items()}
    assert {"quick", "heavy"} <= set(workers) and not set(workers["quick"]) & set(workers["heavy"])


def test_an_error_in_the_work_reaches_the_caller(pool):
    with pytest.raises(FileNotFoundError):
        viewer_work.run(os.stat, "/no/such/file")


def test_a_worker_that_dies_gives_a_plain_message_and_the_next_request_works(pool):
    with pytest.raises(gr.Error, match="Try again"):
        viewer_work.run(os._exit, 1)
    assert viewer_work.run(os.getpid) != os.getpid()



@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full (every write: disk full)")
def test_a_full_disk_is_said_in_plain_words_without_errno(pool):
    with pytest.raises(gr.Error, match="disk is full") as refusal:
        viewer_work.run(shutil.copyfile, __file__, "/dev/full")
    assert "Errno" not in str(refusal.value) and "/dev" not in str(refusal.value)


def test_a_worker_killed_between_requests_costs_no_request(pool):
    """As the kernel's OOM killer would, or a test's train() in this process (it ends its spawned children)."""
    import signal
    import time
    worker = viewer_work.run(os.getpid)
    os.kill(worker, signal.SIGKILL)
    # Once the pool's manager thread has seen the death and marked the pool broken (the state the
    # next request finds): between requests, however long that takes on this machine.
    pool = viewer_work._pools[viewer_work.HEAVY]
    deadline = time.monotonic() + 60
    while not pool._broken and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pool._broken
    assert viewer_work.run(os.getpid) not in (worker, os.getpid())


def test_a_lane_takes_turns_in_order_rests_for_its_share_and_refuses_too_many_at_once():
    """A lane's turns (no worker needed to see them)."""
    import threading
    import time
    turns, order, threads = viewer_work._Turns(share=0.25), [], []
    turns.take()                                 # a GIF in the worker while the room asks for more

    def ask(name: str) -> None:
        turns.take()
        order.append((name, time.monotonic()))
        turns.done(cpu_seconds=0.1)              # each took 0.1 s of CPU: the lane rests 0.3 s
    for count, name in enumerate(("a", "b", "c"), start=1):
        threads.append(threading.Thread(target=ask, args=(name,)))
        threads[-1].start()
        _waiting(turns, count)                   # in this order
    turns.done(cpu_seconds=0.0)
    for thread in threads:
        thread.join(60)
    assert [name for name, _ in order] == ["a", "b", "c"]
    gaps = [later - earlier for (_, earlier), (_, later) in zip(order, order[1:])]
    assert all(gap >= 0.3 for gap in gaps), gaps   # 0.1 s of CPU, then 0.3 s of rest: a quarter of a core

    idle = viewer_work._Turns()
    idle.take()
    waiting = [threading.Thread(target=idle.take, daemon=True) for _ in range(viewer_work.MAX_WAITING)]
    for thread in waiting:
        thread.start()
    _waiting(idle, viewer_work.MAX_WAITING)
    with pytest.raises(viewer_work.Busy):
        idle.take()


def test_a_busy_worker_refuses_in_the_projects_words(pool, monkeypatch):
    monkeypatch.setattr(viewer_work._turns[viewer_work.HEAVY], "most_waiting", 0)
    with pytest.raises(gr.Error, match="The file maker is busy: 0 requests from this room are ahead of yours; "
                                       "try again in a minute"):
        viewer_work.run(os.getpid)
    monkeypatch.setattr(viewer_work._turns[viewer_work.QUICK], "most_waiting", 0)
    with pytest.raises(gr.Error, match="The sampler is busy: 0 requests from this room are ahead of yours"):
        viewer_work.run(sample_work.read_png, "unused.png")


def _waiting(turns, count: int) -> None:
    """Until `count` requests wait in the lane's line (each a thread that reached take())."""
    import time
    deadline = time.monotonic() + 60
    while len(turns._waiting) != count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(turns._waiting) == count


def test_a_request_not_served_within_its_deadline_is_told_how_many_are_ahead():
    """A file in the worker for longer than the next request may wait: that one is told, and leaves
    the line; the one after it still gets its turn."""
    import threading
    import time
    turns = viewer_work._Turns()
    turns.take()                                  # a GIF being made
    later = threading.Thread(target=turns.take, daemon=True)   # no deadline, behind the impatient one
    told = []

    def impatient() -> None:
        try:
            turns.take(wait_at_most=0.3)
        except viewer_work.Busy as busy:
            told.append((busy.args[0], time.monotonic() - asked))
    asked = time.monotonic()
    waiter = threading.Thread(target=impatient, daemon=True)
    waiter.start()
    _waiting(turns, 1)
    later.start()
    waiter.join(60)
    assert told and told[0][0] == 1 and told[0][1] >= 0.3, told   # the one being made is ahead
    assert len(turns._waiting) == 1
    turns.done()
    later.join(60)
    assert not later.is_alive() and turns._serving is not None and not turns._waiting


def test_a_request_whose_client_left_is_dropped_before_its_turn():
    import threading
    turns, served, dropped = viewer_work._Turns(), [], []
    turns.take()                                  # a file being made
    left = threading.Event()

    def viewer(name: str, gone=None) -> None:
        try:
            turns.take(gone=gone)
        except viewer_work.Gone:
            dropped.append(name)
            return
        served.append(name)
        turns.done()
    threads = [threading.Thread(target=viewer, args=("leaver", left.is_set), daemon=True)]
    threads[-1].start()
    _waiting(turns, 1)
    threads.append(threading.Thread(target=viewer, args=("stays",), daemon=True))
    threads[-1].start()
    _waiting(turns, 2)
    left.set()                                    # its page closed while it waited
    threads[0].join(60)
    assert dropped == ["leaver"] and len(turns._waiting) == 1
    turns.done()
    for thread in threads:
        thread.join(60)
    assert served == ["stays"]


def test_the_hosts_work_has_a_worker_of_its_own_at_the_apps_priority(pool):
    """Behind no viewer's request, and not behind the trainer either (bench/README.md, "A room's files")."""
    host = viewer_work.run_for_host(os.getpid)
    quick = viewer_work._get_pool(viewer_work.QUICK).submit(os.getpid).result()
    assert host not in (os.getpid(), viewer_work.run(os.getpid), quick)     # nor the heavy lane's, nor the quick's
    assert viewer_work.run_for_host(os.getpriority, os.PRIO_PROCESS, 0) == os.getpriority(os.PRIO_PROCESS, 0)


def test_an_uploaded_files_path_reaches_the_worker_as_a_plain_string(pool):
    """Gradio's NamedString, unpickled there, would make the worker import Gradio before the request."""
    from gradio.utils import NamedString
    path = NamedString("/tmp/upload.zip")
    assert viewer_work.run_for_host(type, path) is str
    assert viewer_work.run(type, path) is str
