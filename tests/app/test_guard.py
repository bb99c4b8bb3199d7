"""What a viewer can make the server read, and at what cost (issue 13): the real app as its own
process (python app.py), driven through its named API as a script would.

The app runs with a host key, a private dataset cache and upload folder, and one extra allowed
folder (BLINK_DATA_ROOTS). Everything else the tests write lies under pytest's temp folder, which
is outside what the server may read: as any other app's files under /tmp would be.
"""
from __future__ import annotations

import json
import os
import re
import struct
import time
import zipfile
import zlib

import numpy as np
import pytest
from gradio_client import handle_file
from gradio_client.exceptions import AppError
from PIL import Image

from core import data
from core.config import TrainConfig
from core.rundir import RunDir
from tests.apphelpers import children_of, wait_for
from tests.filehelpers import cpu_plan, png_bytes, save_generator_pair, tiny_generator

pytestmark = pytest.mark.slow
KEY = "the-host-key"
RED, BLUE = (255, 0, 0), (0, 0, 255)


def _solid(path, colour, size=(20, 20)):
    Image.new("RGB", size, colour).save(path)
    return str(path)


APP_ENV = {"BLINK_HOST_KEY": KEY, "BLINK_DATA_DIR": "{folder}/cache", "BLINK_OFFLINE": "1",
           "BLINK_DATA_ROOTS": "{folder}/allowed", "GRADIO_TEMP_DIR": "{folder}/gradio"}


def APP_SETUP(folder) -> None:
    """The app's current run trained on three images in the allowed folder; a secret folder beside it."""
    allowed, secret = folder / "allowed", folder / "secret"
    for place in (allowed / "pics", secret):
        place.mkdir(parents=True)
    for i in range(3):
        _solid(allowed / "pics" / f"{i}.png", (40 * i, 40 * i, 40 * i))
    for i in range(2):                     # a folder the server must never read for a viewer
        _solid(secret / f"{i}.png", RED)
    config = TrainConfig(dataset="folder", data_path=str(allowed / "pics"))
    run = RunDir.create(cpu_plan(config), str(folder / "runs"))
    save_generator_pair(run.path, tiny_generator(), config=config.to_dict())
    run.save_grid(np.zeros((4, 1, 28, 28), np.float32), 100)


@pytest.fixture(scope="module")
def guarded(app):
    """(client, paths): a client of the module's app, and the folders APP_SETUP made."""
    folder = app.folder
    return app.client(), dict(root=folder, allowed=folder / "allowed", secret=folder / "secret")


def _neighbours(client):
    return client.predict(0, 1.0, 3, 0, 0, 0, 0, 0, api_name="/neighbours")


def _pixels(path):
    with Image.open(path) as img:
        return np.asarray(img.convert("RGB")).reshape(-1, 3)


# ==== item 1: a generator's metadata never steers a read ==========================================
def test_neighbours_search_the_runs_own_images_never_where_an_upload_points(guarded, tmp_path):
    client, paths = guarded
    _, caption = _neighbours(client)
    assert "nearest of 3 " in caption                      # the run's folder passes the guard
    # An uploaded generator naming a folder outside the allowed ones: its metadata is ignored.
    weights, meta = save_generator_pair(str(tmp_path / "evil"), tiny_generator(seed=1),
                               config={"dataset": "folder", "data_path": str(paths["secret"])})
    client.predict([handle_file(weights), handle_file(meta)], KEY, api_name="/upload_generator")
    try:
        _, caption = _neighbours(client)
    finally:
        client.predict(KEY, api_name="/use_run_generator")
    bundled = len(data.load_bundled_mnist())
    assert f"of {bundled:,} bundled-mnist training images" in caption   # not the secret folder's 2


# ==== item 2: budgets a small zip cannot escape ===================================================
def test_a_zip_of_too_many_entries_is_refused_at_upload(guarded, tmp_path):
    client, _ = guarded
    path = tmp_path / "many.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for i in range(data.MAX_FILES + 1):
            zf.writestr(f"{i}.png", b"x")
    *_, note = client.predict(handle_file(str(path)), api_name="/upload_dataset")
    assert "Upload refused" in note and f"more than {data.MAX_FILES:,} files" in note


def _png_with_padding(extra_bytes: int) -> bytes:
    """A valid 8x8 PNG carrying one private ancillary chunk of zeros: a huge file that zips small."""
    png = png_bytes(Image.new("RGB", (8, 8), BLUE))
    chunk = b"zpAd" + bytes(extra_bytes)
    padding = struct.pack(">I", extra_bytes) + chunk + struct.pack(">I", zlib.crc32(chunk))
    return png[:33] + padding + png[33:]                    # after the 8-byte signature and IHDR


def test_an_image_file_over_the_byte_limit_is_never_decoded(guarded, tmp_path):
    client, _ = guarded
    path = tmp_path / "one-big.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("big.png", _png_with_padding(data.MAX_IMAGE_BYTES + 1))
        zf.writestr("small.png", png_bytes(Image.new("RGB", (8, 8), RED)))
    assert os.path.getsize(path) < data.MAX_IMAGE_BYTES / 100    # a small upload
    _, kept, _ = client.predict(handle_file(str(path)), api_name="/upload_dataset")
    note, grid = client.predict("folder", kept, api_name="/preview_dataset")
    assert grid is not None, note
    colours = _pixels(grid)
    assert (colours == RED).all(1).any() and not (colours == BLUE).all(1).any()   # only the small one


# ==== item 7: temp folders, links, host keys =======================================================
def test_preview_refuses_temp_folders_outside_the_apps_uploads(guarded, tmp_path):
    client, paths = guarded
    note, grid = client.predict("folder", str(paths["secret"]), api_name="/preview_dataset")
    assert grid is None and "outside the folders this server allows" in note
    assert str(paths["root"]) not in note                    # no server path in the message


def test_an_upload_name_names_a_kept_zip_and_nothing_else(guarded):
    client, _ = guarded
    for name in ("upload:../../secret.zip", "upload:/etc/passwd", "upload:x/y.zip", "upload:"):
        note, grid = client.predict("folder", name, api_name="/preview_dataset")
        assert grid is None and "not one this server gave" in note, (name, note)


def test_gradios_upload_folder_is_not_a_folder_my_images_may_read(guarded):
    """Gradio's upload folder holds other people's files until they are checked (and, machine-wide
    as `<temp>/gradio`, every Gradio app's): a typed path into it is refused like any other."""
    client, paths = guarded
    pics = paths["root"] / "gradio" / "someone-elses"
    pics.mkdir(parents=True)
    _solid(pics / "0.png", RED)
    note, grid = client.predict("folder", str(pics), api_name="/preview_dataset")
    assert grid is None and "outside the folders this server allows" in note, note


def test_preview_does_not_follow_a_file_link_out_of_an_allowed_folder(guarded):
    client, paths = guarded
    folder = paths["allowed"] / "linked"
    folder.mkdir()
    _solid(folder / "own.png", BLUE)
    os.symlink(paths["secret"] / "0.png", folder / "elsewhere.png")
    note, grid = client.predict("folder", str(folder), api_name="/preview_dataset")
    assert grid is not None, note
    colours = _pixels(grid)
    assert (colours == BLUE).all(1).any() and not (colours == RED).all(1).any()


def test_wrong_host_keys_are_answered_one_slow_step_at_a_time_right_ones_at_once(guarded):
    from app.ui import WRONG_KEY_SECONDS
    client, _ = guarded
    guesses = 6
    start = time.monotonic()
    wrong = [client.submit(f"guess-{i}", api_name="/stop") for i in range(guesses)]
    right = client.submit(KEY, api_name="/stop")
    right.result()
    right_done = time.monotonic()
    for job in wrong:
        with pytest.raises(AppError, match="host key"):
            job.result()
    wrong_done = time.monotonic()
    assert wrong_done - start >= guesses * WRONG_KEY_SECONDS   # the guesses waited in turn
    assert right_done < wrong_done                             # the host was not queued behind them



def test_keyless_presses_are_refused_at_once_never_queued_behind_the_guesses(app):
    """No key guesses nothing: a room of keyless Stops is answered at once, all of them while twelve
    wrong keys still wait their turns (six seconds of them), and the host's Stop pressed after them
    is not kept waiting either."""
    import threading
    from app.ui import WRONG_KEY_SECONDS
    answers, done = [], []

    def press(key: str) -> None:
        try:
            app.call("stop", key)
        except RuntimeError as exc:
            answers.append((key, str(exc)))
        done.append(key)
    guesses = [threading.Thread(target=press, args=(f"guess-{i}",)) for i in range(12)]
    room = [threading.Thread(target=press, args=("",)) for _ in range(60)]
    for thread in guesses + room:
        thread.start()
    for thread in room:
        thread.join(60)
    assert done.count("") == 60 and len([k for k in done if k.startswith("guess")]) < 12, done
    app.call("stop", KEY)                                    # the host's, after them
    assert len([k for k in done if k.startswith("guess")]) < 12, "the host waited behind the guesses"
    for thread in guesses:
        thread.join(12 * WRONG_KEY_SECONDS + 60)
    assert all("Only the host can" in words for _, words in answers) and len(answers) == 72


def test_silent_and_half_sent_connections_are_closed_and_a_real_request_still_answers(app):
    """40 clients that never finish a request (20 silent, 20 sending headers a line at a time and
    stopping) are all closed about REQUEST_HEADERS_SECONDS after they connected; meanwhile the
    page and a long poll answer as always."""
    import socket
    import urllib.request
    from app.serving import REQUEST_HEADERS_SECONDS
    held = []
    for i in range(40):
        sock = socket.create_connection(("127.0.0.1", app.port), timeout=5)
        if i % 2:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow")   # never the blank line
        held.append(sock)
    opened = time.monotonic()
    with urllib.request.urlopen(app.url + "live/status", timeout=30) as answer:   # the server still serves
        assert answer.status == 200
    closed_after = []
    for sock in held:
        sock.settimeout(REQUEST_HEADERS_SECONDS + 20)
        try:
            assert sock.recv(1024) == b""     # closed by the server, nothing sent
        except ConnectionResetError:
            pass
        closed_after.append(time.monotonic() - opened)
        sock.close()
    assert max(closed_after) < REQUEST_HEADERS_SECONDS + 10, closed_after
    assert min(closed_after) >= REQUEST_HEADERS_SECONDS - 2, closed_after   # not before their time


# ==== issue 45: Gradio's upload route bounded; Gradio's own refusals one line ======================
def _upload(app, files, source: str = "127.0.0.1", declared: int | None = None) -> tuple[int, str]:
    """POST files to Gradio's upload route as a page does (one multipart request) from `source`, a
    loopback address of this machine; (status, text). declared: the size to state instead, the
    body then never sent (what a server that reads no byte of a refused upload answers anyway)."""
    import http.client
    import uuid
    boundary = uuid.uuid4().hex
    body = b"".join(f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
                    f"Content-Type: application/octet-stream\r\n\r\n".encode() + content + b"\r\n"
                    for name, content in files) + f"--{boundary}--\r\n".encode()
    connection = http.client.HTTPConnection("127.0.0.1", app.port, timeout=60, source_address=(source, 0))
    try:
        connection.putrequest("POST", "/gradio_api/upload")
        connection.putheader("Content-Type", f"multipart/form-data; boundary={boundary}")
        connection.putheader("Content-Length", str(len(body) if declared is None else declared))
        connection.endheaders()
        if declared is None:
            connection.send(body)
        answer = connection.getresponse()
        return answer.status, answer.read().decode()
    finally:
        connection.close()


def _held(folder) -> dict[str, int]:
    return {str(p): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def test_an_upload_that_does_not_fit_beside_the_copies_held_is_refused_before_a_byte_is_read(app):
    from app.serving import UPLOADS_AT_ONCE
    cap = UPLOADS_AT_ONCE * TrainConfig.max_image_mb * 2**20
    uploads = app.folder / "gradio"
    status, text = _upload(app, [("held.bin", os.urandom(50_000))])
    assert status == 200, text
    (copy,) = json.loads(text)   # named by its handle, not where it lies (app/serving.py FileHandles)
    assert copy.startswith("blink-files/") and os.path.getsize(uploads / copy.split("/", 1)[1]) == 50_000
    before = _held(uploads)
    for declared in (cap + 1, cap - 50_000 + 1):        # too big alone; too big beside the copy held
        status, text = _upload(app, [], declared=declared)
        assert status == 413 and text.startswith("Upload refused") and f"{cap // 2**20} MB" in text, text
        assert str(uploads) not in text
    assert _held(uploads) == before                       # nothing of them written
    assert sum(before.values()) <= cap
    log = app.read_log()
    assert log.count("refused (upload, HTTP 413): Upload refused") == 2 and "Traceback" not in log, log[-3000:]


def test_an_address_that_sent_its_share_of_files_is_refused_and_its_files_not_kept(app):
    from app.serving import UPLOAD_FILES_PER_CLIENT
    uploads, flood = app.folder / "gradio", "127.0.0.2"     # an address of its own: other tests' uploads do not count
    status, text = _upload(app, [(f"flood-{i}.bin", b"%d" % i) for i in range(UPLOAD_FILES_PER_CLIENT + 1)], flood)
    assert status == 429 and f"at most {UPLOAD_FILES_PER_CLIENT} files per address" in text, text
    assert not list(uploads.rglob("flood-*.bin"))          # the ones Gradio wrote were removed again
    for i in range(UPLOAD_FILES_PER_CLIENT):               # one at a time, its share is taken
        status, text = _upload(app, [(f"one-{i}.bin", b"one %d" % i)], flood)
        assert status == 200, (i, text)
    status, text = _upload(app, [("one-more.bin", b"one more")], flood)
    assert status == 429 and "Try again later" in text, text
    assert not list(uploads.rglob("one-more.bin"))
    assert _upload(app, [("another-address.bin", b"z")])[0] == 200     # 127.0.0.1 still uploads


def test_answers_name_each_file_by_a_handle_that_fetches_it_never_by_its_server_path(app):
    """Gradio names the files it answers with by where they lie (its own folder, under the server's
    temp folder); the app's answers carry a handle instead, by which the page fetches the file and
    sends it back as an input (test_a_zip_of_too_many_entries_is_refused_at_upload's upload does)."""
    import tempfile
    import urllib.request
    image, _ = app.call("sample", 3, 16, "seed")
    generator_files = app.call("download_generator")[0]
    for file in (image, *generator_files):
        said = json.dumps(file)
        assert file["path"].startswith("blink-files/") and f"/gradio_api/file={file['path']}" in file["url"], said
        assert str(app.folder) not in said and tempfile.gettempdir() not in said, said
        with urllib.request.urlopen(file["url"], timeout=30) as answer:
            assert answer.status == 200 and answer.read()


def test_calls_gradio_refuses_are_one_line_each_in_the_log_and_name_no_server_path(app):
    """Too few values, a file without its `meta`, a NUL in a path, a path never uploaded: each
    answered as the project's refusal, one line in the log, where Gradio printed a traceback."""
    from tests.apphelpers import ROOT
    meta = {"_type": "gradio.FileData"}
    calls = [(("sample",), "/sample: it takes 4 values, the call sent 0"),
             (("upload_dataset", {"path": "/etc/passwd"}, ""), "/upload_dataset: not a valid FileData"),
             (("upload_dataset", {"path": "a\x00b", "meta": meta}, ""), "a NUL character"),
             (("upload_dataset", {"path": "secret.zip", "meta": meta}, ""), "not uploaded to this server")]
    for (api_name, *args), words in calls:
        with pytest.raises(RuntimeError, match=re.escape(words)) as refused:
            app.call(api_name, *args)
        assert ROOT not in str(refused.value) and str(app.folder) not in str(refused.value), refused.value
    log = app.read_log()
    assert "Traceback" not in log, log[-3000:]
    lines = [line for line in log.splitlines() if line.startswith("refused (Malformed call): ")]
    assert len(lines) == len(calls) and all(words in " ".join(lines) for _, words in calls), lines


def test_a_huge_text_value_is_refused_where_it_enters_never_echoed_or_logged_whole(app):
    """A keyless call with a megabyte in a class field or a path field: refused naming the field and
    its bound, the answer and the log a line each, not the value twice over."""
    from core.architecture import MAX_CLASS_NAME
    for api_name, args, bound in (("sample", (0, 4, "7" * 1_000_000), MAX_CLASS_NAME),
                                  ("preview_dataset", ("folder", "/" + "p" * 1_000_000), 4096)):
        logged = len(app.read_log())
        with pytest.raises(RuntimeError) as refused:
            app.call(api_name, *args)
        answer = str(refused.value)
        assert "1,000,00" in answer and f"more than the {bound:,} this field takes" in answer, answer[:300]
        assert len(answer) < 1000 and len(app.read_log()) - logged < 1000


# ==== issue 45: a room's files wait with a bound; the host never waits behind them ==================
def _asked(app, api_name: str, *args) -> tuple[str, float]:
    """One viewer's request through the REST road: ("made" or the refusal's words, seconds to the answer)."""
    asked = time.monotonic()
    try:
        app.call(api_name, *args, timeout=120)
        return "made", time.monotonic() - asked
    except RuntimeError as exc:
        return str(exc), time.monotonic() - asked


def _begun_then_left(app, api_name: str, *args) -> None:
    """A viewer who asks through Gradio's queue as a page does (/queue/join, then the session's event
    stream), waits until Gradio has handed the request to its handler (its "process_starts" message),
    and closes the page: Gradio removes an event not yet handed out without a word, so only a
    handler's drop can be counted in the log. `args` are every input the page sends, its state too
    (the Sample tab's view, sent as null)."""
    import urllib.request
    import uuid
    with urllib.request.urlopen(f"{app.url}config", timeout=60) as answer:
        fn_index = next(d["id"] for d in json.load(answer)["dependencies"] if d.get("api_name") == api_name)
    session = uuid.uuid4().hex
    join = urllib.request.Request(f"{app.url}gradio_api/queue/join", method="POST",
                                  data=json.dumps({"data": list(args), "fn_index": fn_index, "session_hash": session,
                                                   "trigger_id": None, "event_data": None}).encode(),
                                  headers={"Content-Type": "application/json"})
    urllib.request.urlopen(join, timeout=60).close()
    with urllib.request.urlopen(f"{app.url}gradio_api/queue/data?session_hash={session}", timeout=120) as stream:
        for line in stream:
            if line.startswith(b"data: ") and json.loads(line[6:]).get("msg") == "process_starts":
                return   # the page closes here, its request waiting in the lane
    raise AssertionError(f"{api_name}: the stream ended before the request was handed to its handler")


def _heavy_lane_worker(app) -> int:
    """The pid of the app's heavy-lane worker (the one process of the app's at nice 19), once one exists."""
    def nice(pid: int) -> int | None:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return int(f.read().rpartition(")")[2].split()[16])
        except (OSError, ValueError, IndexError):
            return None
    workers = [pid for pid in children_of(app.process.pid) if nice(pid) == 19]
    assert len(workers) == 1, workers
    return workers[0]


def _request_waiting_in(pid: int) -> bool:
    """Whether a request lies unread in one of `pid`'s pipes: a held worker's next call, sent to it."""
    import array
    import fcntl
    import termios
    for fd in os.listdir(f"/proc/{pid}/fd"):
        path = f"/proc/{pid}/fd/{fd}"
        try:
            if not os.readlink(path).startswith("pipe:"):
                continue
            pipe = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            unread = array.array("i", [0])
            fcntl.ioctl(pipe, termios.FIONREAD, unread)
            if unread[0]:
                return True
        finally:
            os.close(pipe)
    return False


def test_sixty_viewers_files_are_made_or_refused_within_the_bound_and_the_hosts_upload_goes_first(
        app, guarded, tmp_path):
    """60 keyless viewers ask for zips, GIFs and neighbours at once (no run training: the heavy lane
    makes them back to back, without its rests), behind a timelapse of 120 grids; three more ask and
    close their pages while they wait. The host's dataset upload is checked meanwhile, at once; each
    viewer gets a file or the words "busy" within the lane's wait bound (and one file's making); the
    three who left are dropped, not made. (The host's lane has its own worker, at the app's
    priority: apart from that worker's start, the host's upload is as quick as with no viewer.)

    The lane is held while the three leave, whatever this machine's speed: its worker is stopped
    (SIGSTOP) before the timelapse is sent to it, and let go once the three are dropped."""
    import signal
    import threading
    from app.viewer_work import MAX_FILES_WAITING, MAX_WAIT_SECONDS
    from core.rundir import list_runs
    client, _ = guarded
    run = list_runs(app.runs_root)[0]   # the app's current run: 120 grids of noise make a slow timelapse
    noise = np.random.default_rng(0).uniform(-1, 1, (100, 1, 28, 28)).astype(np.float32)
    for step in range(200, 12_100, 100):
        run.save_grid(noise, step, columns=10)
    upload = tmp_path / "host.zip"
    with zipfile.ZipFile(upload, "w") as zf:
        for i in range(4):
            zf.writestr(f"{i}.png", png_bytes(Image.new("RGB", (8, 8), (60 * i, 0, 0))))
    dropped_before = app.read_log().count("refused (Dropped)")

    asks = [("download_samples", i, 256, "seed") for i in range(20)]
    asks += [("interpolation_gif", i, i + 1, 32, "spherical", "seed", "seed") for i in range(20)]
    asks += [("neighbours", i, 1.0, 16, 0, 0, 0, 0, 0) for i in range(20)]
    answers: list = [None] * len(asks)

    def viewer(i: int) -> None:
        answers[i] = _asked(app, *asks[i])
    assert _asked(app, "download_samples", 0, 4, "seed")[0] == "made"   # the heavy lane's worker exists
    worker = _heavy_lane_worker(app)
    os.kill(worker, signal.SIGSTOP)
    try:
        timelapse = threading.Thread(target=lambda: answers.append(_asked(app, "timelapse")))
        timelapse.start()
        wait_for(lambda: _request_waiting_in(worker), 120, interval=0.01, what="the timelapse sent to the held worker")
        for _ in range(3):   # their pages close while they wait behind it
            _begun_then_left(app, "interpolation_gif", None, 7, 8, 32, "linear", "seed", "seed")
        wait_for(lambda: app.read_log().count("refused (Dropped)") - dropped_before == 3, 120,
                 what="the three who left to be dropped")
    finally:
        os.kill(worker, signal.SIGCONT)
    viewers = [threading.Thread(target=viewer, args=(i,)) for i in range(len(asks))]
    for thread in viewers:
        thread.start()
    started = time.monotonic()
    *_, note = client.predict(handle_file(str(upload)), KEY, api_name="/upload_dataset")
    host_seconds = time.monotonic() - started
    for thread in [timelapse, *viewers]:
        thread.join(MAX_WAIT_SECONDS + 120)

    assert "4 images in the zip" in note, note
    assert host_seconds < 10, host_seconds       # a 4-image zip's check, whatever the files: not behind them
    said = [words for words, _ in answers]
    busy = [w for w in said if "The file maker is busy" in w and "try again in a minute" in w]
    assert len(busy) + said.count("made") == len(answers), [w for w in said if w != "made" and w not in busy]
    assert busy and said.count("made") > MAX_FILES_WAITING, (len(busy), said.count("made"))
    assert max(seconds for _, seconds in answers) < MAX_WAIT_SECONDS + 30, sorted(s for _, s in answers)[-5:]
    assert app.read_log().count("refused (Dropped)") - dropped_before == 3   # and no more
