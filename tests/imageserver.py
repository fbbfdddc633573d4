"""A static file server on loopback, as a host pulling its image would meet
one: Python's http.server in a thread, with ETag / If-None-Match beside the
stock handler's Last-Modified / If-Modified-Since, and a log of what it
answered, so that tests can tell a download from a 304.

    with ImageServer(directory) as server:
        fetch(server.url + "/host")
        assert server.downloads("/host") == 1
"""

import hashlib
import http.server
import os
import threading

__all__ = ["ImageServer", "stand_in_image"]


class _Handler(http.server.SimpleHTTPRequestHandler):
    # The ETag is the content's hash: a file rewritten within the second of
    # its last change still gets a new one, which Last-Modified cannot give.
    def send_head(self):
        path = self.translate_path(self.path)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                etag = '"' + hashlib.sha256(f.read()).hexdigest()[:32] + '"'
            if etag in [t.strip() for t in self.headers.get("If-None-Match", "").split(",")]:
                self.send_response(304)
                self.send_header("ETag", etag)
                self.end_headers()
                return None
            self._etag = etag
        return super().send_head()

    def end_headers(self):
        etag = getattr(self, "_etag", None)
        if etag:
            self.send_header("ETag", etag)
            self._etag = None
        super().end_headers()

    def log_request(self, code="-", size="-"):
        self.server.answers.append((self.path, int(getattr(code, "value", code))))
        hook = self.server.after.pop(self.path, None)
        if hook:
            hook()

    def log_message(self, *args):
        pass


class ImageServer:
    """Serve DIRECTORY on 127.0.0.1 (a free port) until closed."""

    def __init__(self, directory):
        handler = lambda *a, **kw: _Handler(*a, directory=str(directory), **kw)  # noqa: E731
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.answers = []
        self.httpd.after = {}
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)

    @property
    def answers(self):
        """`(path, status)` of every request answered so far."""
        return list(self.httpd.answers)

    def after(self, path, hook):
        """Call HOOK once, right after the next answer to a request for PATH
        (to change what is served between two requests of one client)."""
        self.httpd.after[path] = hook

    def downloads(self, path):
        """How many times PATH was sent whole (status 200)."""
        return sum(1 for p, status in self.answers if p == path and status == 200)


def stand_in_image(path, marker, text):
    """Write a Python zip application to PATH that stands for an image:
    run with `python3 PATH`, it appends TEXT to the file MARKER (so that a
    test sees it was applied, and how often) and exits 0."""
    import io
    import zipfile
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        info = zipfile.ZipInfo("__main__.py", date_time=(1980, 1, 1, 0, 0, 0))
        z.writestr(info, f"with open({str(marker)!r}, 'a') as f:\n"
                         f"    f.write({text + chr(10)!r})\n")
    data = buffer.getvalue()
    with open(path, "wb") as f:
        f.write(data)
    return data
