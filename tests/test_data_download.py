"""`euler data download` against a local HTTP server (no network): checksums, resume, shard checks."""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from euler_core.data import download as dl
from euler_core.data.shards import HEADER_BYTES, MAGIC, open_shard


class Server:
    """Serves `files` (name -> bytes) with Range support; can drop the connection mid-file."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.headers: dict[str, dict] = {}
        self.drop_after: dict[str, int] = {}  # name -> cut the body after this many bytes, once
        self.requests: list[tuple[str, str | None]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                name = self.path.lstrip("/").split("/", 1)[-1]
                rng = self.headers.get("Range")
                server.requests.append((name, rng))
                if name not in server.files:
                    self.send_error(404)
                    return
                data = server.files[name]
                start = 0
                if rng:
                    start = int(rng.split("=")[1].split("-")[0])
                    if start >= len(data):
                        self.send_error(416)
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start:]
                self.send_header("Content-Length", str(len(body)))
                for k, v in server.headers.get(name, {}).items():
                    self.send_header(k, v)
                self.end_headers()
                cut = server.drop_after.pop(name, None)
                if cut is not None:
                    self.wfile.write(body[:cut])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/d/"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def shard_bytes(tokens) -> bytes:
    header = np.zeros(256, dtype="<i4")
    header[:3] = MAGIC, 1, len(tokens)
    return header.tobytes() + np.asarray(tokens, dtype="<u2").tobytes()


def test_tinyshakespeare_checksum_and_skip_when_present(server, tmp_path, monkeypatch):
    text = b"First Citizen:\nBefore we proceed any further, hear me speak.\n" * 1000
    server.files["input.txt"] = text
    monkeypatch.setitem(dl.DATASETS, "tinyshakespeare", dl.Dataset(
        "tinyshakespeare", "test", "unused", lambda n: [dl.RemoteFile("input.txt", hashlib.sha256(text).hexdigest())]))
    [path] = dl.download("tinyshakespeare", out=tmp_path, base_url=server.url, progress=False)
    assert path.read_bytes() == text and not (tmp_path / "input.txt.part").exists()
    dl.download("tinyshakespeare", out=tmp_path, base_url=server.url, progress=False)
    assert len(server.requests) == 1  # already there and verified: not fetched again


def test_checksum_mismatch_is_a_clear_error(server, tmp_path):
    server.files["input.txt"] = b"not shakespeare"
    with pytest.raises(dl.DownloadError, match="SHA-256 .* does not match"):
        dl.download("tinyshakespeare", out=tmp_path, base_url=server.url, progress=False)
    assert not (tmp_path / "input.txt").exists() and not (tmp_path / "input.txt.part").exists()


def test_resumes_after_a_dropped_connection(server, tmp_path):
    data = bytes(range(256)) * 20_000  # 5 MB
    server.files["big.bin"] = data
    server.headers["big.bin"] = {"X-Linked-ETag": f'"{hashlib.sha256(data).hexdigest()}"'}
    server.drop_after["big.bin"] = 1_234_567
    dest = dl.fetch(server.url + "big.bin", tmp_path / "big.bin")
    assert dest.read_bytes() == data
    assert server.requests[0] == ("big.bin", None) and server.requests[1] == ("big.bin", "bytes=1234567-")


def test_resumes_a_part_left_by_an_earlier_run(server, tmp_path):
    data = b"x" * 100_000 + b"y" * 50_000
    server.files["f.txt"] = data
    (tmp_path / "f.txt.part").write_bytes(data[:100_000])
    dl.fetch(server.url + "f.txt", tmp_path / "f.txt", sha256=hashlib.sha256(data).hexdigest())
    assert (tmp_path / "f.txt").read_bytes() == data and server.requests == [("f.txt", "bytes=100000-")]


def test_server_stated_checksum_is_checked(server, tmp_path):
    server.files["f.txt"] = b"abc"
    server.headers["f.txt"] = {"X-Linked-ETag": '"' + "0" * 64 + '"'}
    with pytest.raises(dl.DownloadError, match="does not match"):
        dl.fetch(server.url + "f.txt", tmp_path / "f.txt")


def test_fineweb_edu_shards_are_header_checked(server, tmp_path):
    server.files["edu_fineweb_val_000000.bin"] = shard_bytes(range(1000))
    server.files["edu_fineweb_train_000001.bin"] = shard_bytes(range(2000))
    server.files["edu_fineweb_train_000002.bin"] = b"\x00" * (HEADER_BYTES + 10)  # wrong magic
    paths = dl.download("fineweb-edu", out=tmp_path, shards=1, base_url=server.url, progress=False)
    assert [p.name for p in paths] == ["edu_fineweb_val_000000.bin", "edu_fineweb_train_000001.bin"]
    assert len(open_shard(paths[1])) == 2000
    with pytest.raises(dl.DownloadError, match="not a valid token shard.*magic"):
        dl.download("fineweb-edu", out=tmp_path, shards=2, base_url=server.url, progress=False)
    assert not (tmp_path / "edu_fineweb_train_000002.bin").exists()


def test_errors(server, tmp_path):
    with pytest.raises(ValueError, match="unknown data set 'nope'"):
        dl.download("nope")
    with pytest.raises(dl.DownloadError, match="HTTP 404"):
        dl.fetch(server.url + "missing.txt", tmp_path / "m.txt")
