"""Launch Blink: `python app.py` (add --help for options)."""
import argparse
import atexit
import os
import signal


def main() -> None:
    parser = argparse.ArgumentParser(description="Blink: watch a GAN learn.")
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                        help="0.0.0.0 to let a classroom on the same network open the page")
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    parser.add_argument("--share", action="store_true", help="public gradio.live link (needs internet)")
    parser.add_argument("--host-key", default=os.environ.get("BLINK_HOST_KEY", ""),
                        help="only visitors who type this key may start/stop/pause/resume (env BLINK_HOST_KEY); "
                             "everyone else watches")
    parser.add_argument("--keep-runs", type=int, default=int(os.environ.get("BLINK_KEEP_RUNS", "20")),
                        help="keep at most this many runs; older ones are deleted when a new run starts")
    parser.add_argument("--max-runs-mb", type=float, default=float(os.environ.get("BLINK_MAX_RUNS_MB", "2000")),
                        help="delete the oldest runs while the runs folder is over this size (0: no limit)")
    args = parser.parse_args()
    if args.keep_runs < 1:
        parser.error("--keep-runs must be at least 1 (the current run is always kept)")

    from app.job import Job
    from core.config import TrainConfig
    from app.ui import build_app
    job = Job(keep_runs=args.keep_runs, max_runs_mb=args.max_runs_mb, standby=True)
    demo = build_app(job, host_key=args.host_key)
    # Closing the app ends its trainer (with a checkpoint) rather than leaving an orphan.
    atexit.register(job.shutdown)

    def stop_trainer_then_exit(signum, frame):
        # Ctrl-C or SIGTERM (docker stop, systemd, a Space restart): stop the trainer first,
        # then let Gradio's launch loop close the server on KeyboardInterrupt. Waiting for atexit
        # instead left the trainer running for as long as Gradio took to close (a minute, seen
        # under load), and a supervisor's SIGKILL in that window lost the final checkpoint.
        job.shutdown()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop_trainer_then_exit)
    signal.signal(signal.SIGINT, stop_trainer_then_exit)
    demo.queue(default_concurrency_limit=4).launch(server_name=args.host, server_port=args.port, share=args.share,
                                                    show_error=True, max_file_size=f"{TrainConfig.max_image_mb}mb")


if __name__ == "__main__":   # required: the spawned trainer re-imports the main module
    main()
