"""The app's fork server (app/forkserver.py): an exit code read by several threads at once."""
import multiprocessing.connection
import os
import signal
import threading

from app.forkserver import ForkedProcess


def _end_by_sigkill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_trainer_killed_reads_as_killed_to_every_thread_that_polls_it_at_once():
    """The fork server sends a child's exit code down a pipe once. A viewer's reap, the Stop watchdog
    and multiprocessing's own clean-up may poll together: each must see SIGKILL, never 255 (the
    standard library's fork-server process fails this test)."""
    for _ in range(30):
        process = ForkedProcess(target=_end_by_sigkill)
        process.start()
        multiprocessing.connection.wait([process.sentinel], 30)
        ready = threading.Barrier(8)
        codes = []

        def poll():
            ready.wait()
            codes.append(process.exitcode)
        threads = [threading.Thread(target=poll) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        process.join()
        assert set(codes) == {-signal.SIGKILL} and process.exitcode == -signal.SIGKILL, codes
