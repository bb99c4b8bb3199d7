"""Launch Blink: `python app.py` (add --help for options)."""
import argparse
import atexit
import os


def main() -> None:
    parser = argparse.ArgumentParser(description="Blink: watch a GAN learn.")
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                        help="0.0.0.0 to let a classroom on the same network open the page")
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    parser.add_argument("--share", action="store_true", help="public gradio.live link (needs internet)")
    args = parser.parse_args()

    from app.ui import build_app
    demo = build_app()
    # Closing the app ends its trainer (with a checkpoint) rather than leaving an orphan.
    atexit.register(demo.blink_job.shutdown)
    demo.queue(default_concurrency_limit=4).launch(server_name=args.host, server_port=args.port, share=args.share,
                                                    show_error=True)


if __name__ == "__main__":   # required: the spawned trainer re-imports the main module
    main()
