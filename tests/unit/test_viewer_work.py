"""The viewer-work process: the work runs in another process, at idle priority, and survives a crash."""
import os
import shutil

import gradio as gr
import pytest

from app import viewer_work


@pytest.fixture()
def pool():
    yield
    viewer_work.shutdown()


def test_work_runs_in_another_process_at_the_lowest_priority(pool):
    assert viewer_work.run(os.getpid) != os.getpid()
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    assert viewer_work.run(os.getpriority, os.PRIO_PROCESS, 0) == min(19, ours + viewer_work.WORKER_NICE)


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
    time.sleep(2)   # the pool's manager thread sees the death and marks the pool broken
    assert viewer_work.run(os.getpid) not in (worker, os.getpid())
