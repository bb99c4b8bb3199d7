"""Launch Blink: `python app.py` (add --help for options)."""
import argparse
import atexit
import os
import signal


LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
# Page sessions whose state (the Sample tab's choices) the server keeps, the oldest going first.
# Gradio keeps 10,000, so every page load, reload or script client grew the app for good
# (bench/README.md, "The UI process's memory").
SESSIONS_KEPT = 300
# Events Gradio's queue holds waiting. Left unset, Gradio holds one on a ZeroGPU Space (gradio
# 6.31 Blocks.queue: max_size 1 when SPACES_ZERO_GPU=true), so a room pressing Sample together
# was refused but for a few; a class of any size fits in this, and viewer work has bounds of its own.
QUEUE_SIZE = 512

if __name__ == "__mp_main__":
    # A process the app spawned (a trainer, viewer work) starts here, before it imports anything:
    # it is no Space's main process, and `spaces` (which Gradio imports) would otherwise patch its
    # torch to report ZeroGPU's GPU it does not have.
    from app.chunks import clear_zero_gpu_environment
    clear_zero_gpu_environment()


def notebook_name() -> str:
    """'Colab' or 'Kaggle' when the app runs in one. Under `!python app.py` Gradio cannot tell
    (it looks for an IPython kernel), so without a share link nobody could open the page."""
    if os.environ.get("KAGGLE_KERNEL_RUN_TYPE"):
        return "Kaggle"
    if os.environ.get("COLAB_RELEASE_TAG") or os.environ.get("COLAB_BACKEND_VERSION"):
        return "Colab"
    return ""


def page_needs_share_link(share: bool, no_share: bool) -> bool:
    notebook = notebook_name()
    if share or not notebook:
        return share
    if no_share:
        print(f"In a {notebook} notebook without --share, only this notebook can open the page.", flush=True)
        return False
    print(f"In a {notebook} notebook: making a public share link so others can open the page "
          "(it needs the notebook's internet; --no-share turns it off).", flush=True)
    return True


def room_host_key(host: str, share: bool) -> str:
    """A page others can reach gets a host key unless one was given, as Jupyter prints its token:
    otherwise any viewer's tap could stop the lesson. On localhost alone it stays open."""
    if not share and host in LOCAL_HOSTS:
        return ""
    import secrets
    key = secrets.token_urlsafe(6)
    print(f"Host key: {key}  (this page is reachable by others: type the key on the page to start, stop, "
          "pause or resume; everyone else watches. Set your own with BLINK_HOST_KEY, or --host-key, which every "
          "user of this machine can read in the process list.)", flush=True)
    return key


def limit_malloc_arenas() -> None:
    """glibc gives each thread that allocates its own malloc arena, where freed memory stays:
    Gradio's worker threads grew the app past its memory target in the issue-13 soak, and two
    arenas held it lower (lab/README.md, "Soak"). (No torch threads to limit here: the UI process
    never imports torch; viewer work and training run in processes of their own.)"""
    import ctypes
    try:
        ctypes.CDLL("libc.so.6").mallopt(-8, 2)   # M_ARENA_MAX (glibc only; elsewhere nothing to do)
    except (OSError, AttributeError):
        pass


def use_own_upload_folder() -> None:
    """Gradio keeps uploads in GRADIO_TEMP_DIR, by default `<temp>/gradio`, which every Gradio app
    on the machine shares and serves by path. Unless told otherwise, this app gets a folder of its
    own, removed when it exits (or, if it dies, when the next app starts); each upload leaves it
    once checked (app/ui.py _forget_upload) or unused after a while (app/serving.py UploadLimits)."""
    from app.serving import UPLOADS_FOLDER_PREFIX, app_temp_folder, remove_dead_apps_folders
    remove_dead_apps_folders()     # a killed app's uploads and Sample files would stay for good
    if not os.environ.get("GRADIO_TEMP_DIR"):
        os.environ["GRADIO_TEMP_DIR"] = app_temp_folder(UPLOADS_FOLDER_PREFIX)


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Blink: watch a GAN learn.")
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                        help="0.0.0.0 to let a classroom on the same network open the page")
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    parser.add_argument("--share", action="store_true", help="public gradio.live link (needs internet)")
    parser.add_argument("--host-key", default=os.environ.get("BLINK_HOST_KEY", ""),
                        help="only visitors who type this key may start/stop/pause/resume; everyone else watches. "
                             "Prefer env BLINK_HOST_KEY: every local user can read a command line")
    parser.add_argument("--keep-runs", type=int, default=int(os.environ.get("BLINK_KEEP_RUNS", "20")),
                        help="keep at most this many runs; older ones are deleted when a new run starts")
    parser.add_argument("--max-runs-mb", type=float, default=float(os.environ.get("BLINK_MAX_RUNS_MB", "2000")),
                        help="delete the oldest runs while the runs folder is over this size (0: no limit)")
    parser.add_argument("--no-share", action="store_true",
                        help="in a Colab or Kaggle notebook, do not make the public share link it otherwise makes")
    return parser


def start_job_and_page(args, chunk_runner, host_key: str):
    """The job (its trainers' process server started) and the page built for it."""
    from app.job import Job
    from app import forkserver
    from app.ui import build_app
    forkserver.start()   # the trainers' and viewer work's imports paid now, while the page loads
    job = Job(keep_runs=args.keep_runs, max_runs_mb=args.max_runs_mb, chunk_runner=chunk_runner)
    demo = build_app(job, host_key=host_key)
    if chunk_runner is not None:
        chunk_runner.attach(demo)
    from app import viewer_work
    viewer_work.rest_while(job.is_active)
    viewer_work.warm_up()
    # Closing the app ends its trainer (with a checkpoint) rather than leaving an orphan.
    atexit.register(job.shutdown)
    atexit.register(viewer_work.shutdown)
    return job, demo


def stop_trainer_on_signals(job, demo) -> None:
    from app import viewer_work
    from app.patches import close_quickly
    app_pid = os.getpid()

    def stop_trainer_then_exit(signum, frame):
        if os.getpid() != app_pid:
            # ZeroGPU's worker, forked from this process, inherits this handler (Ctrl-C reaches the
            # whole terminal's group): the app itself stops the run the worker trains.
            return
        # Ctrl-C or SIGTERM (docker stop, systemd, a Space restart): stop the trainer first,
        # then let Gradio's launch loop close the server on KeyboardInterrupt. Waiting for atexit
        # instead left the trainer running for as long as Gradio took to close (long under load:
        # lab/README.md, "Figures taken out of code comments"), and a supervisor's SIGKILL in that
        # window lost the final checkpoint.
        job.shutdown()
        viewer_work.shutdown()
        close_quickly(demo)   # the trainer has stopped and saved: open streams need not hold the server
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop_trainer_then_exit)
    signal.signal(signal.SIGINT, stop_trainer_then_exit)


def launch(demo, args, share: bool, host_key: str) -> None:
    from app import patches
    from app.serving import file_handles, upload_limits
    from app.ui import PAGE_CSS, behind_proxy
    from core.config import TrainConfig
    demo.queue(default_concurrency_limit=4, max_size=QUEUE_SIZE)
    patches.apply(demo)
    # ssr_mode=False: the page is rendered in the browser, as the live panel's script and the
    # /live routes expect, also on a Space (where server-side rendering is otherwise the default).
    demo.launch(server_name=args.host, server_port=args.port, share=share, show_error=True, css=PAGE_CSS,
                ssr_mode=False, state_session_capacity=int(os.environ.get("BLINK_SESSIONS", SESSIONS_KEPT)),
                max_file_size=f"{TrainConfig.max_image_mb}mb",
                app_kwargs={"routes": demo.blink_feed.routes(),   # the live view's push routes (/live/...)
                            # Outermost first: answers name Gradio's files by a handle, not their server folder.
                            "middleware": [file_handles(os.environ["GRADIO_TEMP_DIR"]),
                                           upload_limits(TrainConfig.max_image_mb, behind_proxy(), host_key)]})


def main() -> None:
    from app.patches import trim_gradio_import
    trim_gradio_import()    # before anything imports Gradio (spaces, app.ui)
    parser = argument_parser()
    args = parser.parse_args()
    if args.keep_runs < 1:
        parser.error("--keep-runs must be at least 1 (the current run is always kept)")
    use_own_upload_folder()   # before Gradio is imported: some of its modules read the folder then
    from app import chunks
    try:
        chunks.chunk_seconds("auto")   # a malformed BLINK_CHUNK_SECONDS is refused now, not at Start
    except ValueError as exc:
        parser.error(str(exc))
    # On ZeroGPU a GPU exists only inside an @spaces.GPU call, so runs train in chunks, one call
    # each; `spaces` must be imported before torch and its function made before launch().
    chunk_runner = chunks.GpuChunks() if chunks.on_zero_gpu() else None
    from core.rundir import default_root, writable_problem
    problem = writable_problem(default_root())
    if problem:   # Start refuses new runs then; said now, the host can fix it before the lesson
        print(f"Warning: {problem}. Start refuses new runs until then.", flush=True)
    share = page_needs_share_link(args.share, args.no_share)
    host_key = args.host_key or room_host_key(args.host, share)
    limit_malloc_arenas()
    job, demo = start_job_and_page(args, chunk_runner, host_key)
    stop_trainer_on_signals(job, demo)
    launch(demo, args, share, host_key)


if __name__ == "__main__":   # required: each trainer process re-imports the main module
    main()
