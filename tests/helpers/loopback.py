"""A loopback HTTP server for download tests, and builders of small (and hostile) archives.

`Loopback()` serves files from a dict on 127.0.0.1 (a free port), one thread per connection, and misbehaves on
purpose per path (`Fault`): a truncated body, no Range support, 5xx before 200, redirects, a fixed status
(404/410/403), a stall in the middle of the body, a web page instead of the file. It is bounded: at most
`max_requests` requests (then 503), stalls of at most `MAX_STALL` seconds, sockets that time out, and it shuts
itself down after `lifetime` seconds; `with Loopback() as server:` stops it. `server.log` records every request
(method, path, Range header). `serve_hub` answers the Hugging Face Hub's resolve endpoint for one file, as the
installed huggingface_hub asks it (point it there with `endpoint=`/HF_ENDPOINT).

Nothing here reaches past 127.0.0.1.
"""
from __future__ import annotations

import hashlib
import io
import tarfile
import threading
import zipfile
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MAX_STALL = 5.0


@dataclass
class Fault:
    """How the server misbehaves on one path. Counters count down per request."""

    truncate_at: int | None = None  # send only the bytes up to here (Content-Length still the whole) ...
    truncations: int = 1            # ... this many times, then the whole body
    no_range: bool = False          # ignore Range: always 200 and the whole body
    errors: int = 0                 # answer `error_status` this many times first ...
    error_status: int = 500         # ... then serve normally
    status: int | None = None       # always answer this status (404, 410, 403) with a short page
    redirects: int = 0              # answer 302 to the same path this many times first (a chain)
    redirect_to: str | None = None  # always answer 302 to this path
    stall_at: int | None = None     # after sending the bytes up to here, stall ...
    stall: float = 0.0              # ... this long (at most MAX_STALL), then close without the rest
    stalls: int = 1                 # ... this many times
    html: bool = False              # a Content-Type: text/html answer (a quota page)


class Loopback:
    """A threaded HTTP server on 127.0.0.1 serving `files` (path -> bytes) with per-path `faults`."""

    def __init__(self, files: dict[str, bytes] | None = None, lifetime: float = 60.0, max_requests: int = 200):
        self.files: dict[str, bytes] = {"/" + k.lstrip("/"): v for k, v in (files or {}).items()}
        self.headers: dict[str, dict[str, str]] = {}
        self.faults: dict[str, Fault] = {}
        self.log: list[tuple[str, str, str | None]] = []
        self.max_requests = max_requests
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._timer = threading.Timer(lifetime, self.stop)
        self._timer.daemon = True

    def __enter__(self) -> Loopback:
        self._thread.start()
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Wake every stalled answer, stop serving, close the socket (idempotent)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._timer.cancel()
        self._server.shutdown()
        self._server.server_close()

    def serve(self, path: str, body: bytes, fault: Fault | None = None, headers: dict[str, str] | None = None) -> str:
        """Serve `body` at `path` (misbehaving as `fault` says); return its URL."""
        path = "/" + path.lstrip("/")
        self.files[path] = body
        self.headers[path] = dict(headers or {})
        if fault is not None:
            self.faults[path] = fault
        return self.base + path

    def url(self, path: str) -> str:
        return self.base + "/" + path.lstrip("/")

    def requests(self, path: str) -> list[tuple[str, str, str | None]]:
        path = "/" + path.lstrip("/")
        return [entry for entry in self.log if entry[1] == path]

    def serve_hub(self, repo_id: str, filename: str, revision: str, body: bytes, repo_type: str = "dataset",
                  commit: str = "0" * 40, lfs: bool = True, fault: Fault | None = None,
                  claimed: bytes | None = None) -> str:
        """Answer the Hub's resolve endpoint for one file of one repo at `revision`, with the ETag the Hub gives:
        the LFS object's sha256 (also as X-Linked-Etag), or for a file kept in git its git object id; `claimed`:
        compute them from these bytes instead of `body` (a corrupt mirror). Return the resolve URL."""
        prefix = "" if repo_type == "model" else f"{repo_type}s/"
        of = body if claimed is None else claimed
        sha = hashlib.sha256(of).hexdigest() if lfs else hashlib.sha1(b"blob %d\0" % len(of) + of).hexdigest()
        headers = {"X-Repo-Commit": commit, "ETag": f'"{sha}"'}
        if lfs:
            headers.update({"X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(len(body))})
        return self.serve(f"{prefix}{repo_id}/resolve/{revision}/{filename}", body, fault, headers)


def _handler(server: Loopback):
    class Handler(BaseHTTPRequestHandler):
        timeout = 5  # a client that stops sending is dropped
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def do_HEAD(self) -> None:
            self._answer(head=True)

        def do_GET(self) -> None:
            self._answer(head=False)

        def _short(self, status: int, headers: dict[str, str] | None = None, text: bytes = b"") -> None:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(text)))
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(text)

        def _answer(self, head: bool) -> None:
            path = self.path.split("?", 1)[0]
            with server._lock:
                server.log.append((self.command, path, self.headers.get("Range")))
                if len(server.log) > server.max_requests:
                    return self._short(503, text=b"request budget spent")
                fault = server.faults.get(path, Fault())
                body, extra = server.files.get(path), server.headers.get(path, {})
                if fault.status is not None:
                    return self._short(fault.status, text=b"refused")
                if fault.errors > 0 and not head:
                    fault.errors -= 1
                    return self._short(fault.error_status, text=b"try again")
                if fault.redirect_to is not None:
                    return self._short(302, {"Location": fault.redirect_to})
                if fault.redirects > 0 and not head:
                    fault.redirects -= 1
                    return self._short(302, {"Location": path})
            if body is None:
                return self._short(404, text=b"not found")
            start = 0
            ranged = self.headers.get("Range")
            if ranged and not fault.no_range and ranged.startswith("bytes=") and ranged.endswith("-"):
                start = int(ranged[len("bytes="):-1])
                if start >= len(body):
                    return self._short(416, {"Content-Range": f"bytes */{len(body)}"})
            status = 206 if start else 200
            self.send_response(status)
            for key, value in extra.items():
                self.send_header(key, value)
            self.send_header("Content-Type", "text/html" if fault.html else "application/octet-stream")
            self.send_header("Content-Length", str(len(body) - start))
            self.send_header("Accept-Ranges", "none" if fault.no_range else "bytes")
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            self.end_headers()
            if head:
                return
            end = len(body)
            with server._lock:
                if fault.truncate_at is not None and fault.truncations > 0 and fault.truncate_at > start:
                    fault.truncations -= 1
                    end = fault.truncate_at
                stall = fault.stall_at is not None and fault.stalls > 0 and fault.stall_at >= start
                if stall:
                    fault.stalls -= 1
                    end = fault.stall_at
            self.wfile.write(body[start:end])
            self.wfile.flush()
            if stall:
                server._stop.wait(min(fault.stall, MAX_STALL))
            if end < len(body):
                self.close_connection = True

    return Handler


# -- archive builders ------------------------------------------------------------------------------------------


def zip_bytes(files: dict[str, bytes]) -> bytes:
    """A zip archive of `files` (name -> body), as bytes to serve."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return buf.getvalue()


def tar_bytes(files: dict[str, bytes], mode: str = "w:gz") -> bytes:
    """A tar archive (gzipped by default) of `files` (name -> body), as bytes to serve."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def make_zip(path: Path, files: dict[str, bytes]) -> Path:
    path.write_bytes(zip_bytes(files))
    return path


def make_tar(path: Path, files: dict[str, bytes], mode: str = "w:gz") -> Path:
    path.write_bytes(tar_bytes(files, mode))
    return path


def make_tar_with(path: Path, files: dict[str, bytes], special: tarfile.TarInfo) -> Path:
    """A tar.gz of `files` and one `special` member (a link, a device, a FIFO, a hostile name)."""
    with tarfile.open(path, "w:gz") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        t.addfile(special)
    return path


def member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    """A tar member header of `kind` (tarfile.SYMTYPE, LNKTYPE, CHRTYPE, BLKTYPE, FIFOTYPE, REGTYPE of size 0)."""
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


def tar_slip(path: Path) -> Path:
    return make_tar(path, {"PACS/photo/dog/1.jpg": b"ok", "../../evil.txt": b"escaped"})


def symlink_out(path: Path) -> Path:
    return make_tar_with(path, {"PACS/photo/dog/1.jpg": b"ok"}, member("PACS/link", tarfile.SYMTYPE, "/etc/passwd"))


def device_file(path: Path) -> Path:
    return make_tar_with(path, {"PACS/photo/dog/1.jpg": b"ok"}, member("PACS/dev", tarfile.CHRTYPE))


def zip_bomb(path: Path, expanded: int = 32 << 20) -> Path:
    """A zip whose one member inflates `expanded` bytes of zeros from a few KiB (a ratio near 1000)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        with z.open("PACS/zeros.bin", "w", force_zip64=True) as f:
            block = bytes(1 << 20)
            for _ in range(expanded >> 20):
                f.write(block)
    return path
