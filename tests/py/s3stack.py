"""A real object-storage stack on this machine, for tests/py/test_s3.py and bench/remote.py:
s3rver (tests/s3/server.js, from npm) on a free loopback port, Debian's rclone to upload and to
mount the bucket with FUSE, and zeromount over that mount. Every request the server answers is one
JSON line in its log (method, range, status, body bytes written), so that bytes and requests are
counted where they are paid for: at the server.

Everything started here is stopped by its owner's stop() (mounts: fusermount3 -u, then -z), which
the callers run in finalizers; nothing waits without a timeout."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER_JS = os.path.join(REPO, "tests", "s3", "server.js")
NODE_MODULES = os.path.join(REPO, "tests", "s3", "node_modules", "s3rver")
BUCKET = "ckpt"

# What suits object storage (README, "Checkpoints on S3 and shared filesystems"): no read-ahead
# buffer (rclone's --buffer-size reads ahead of every open handle, which a reader of scattered
# extents pays for), small range requests that do not grow (bench/README.md measures the choice),
# and no HEAD per object for its mtime.
RCLONE_S3_OPTS = ["--read-only", "--vfs-cache-mode", "off", "--buffer-size", "0",
                  "--vfs-read-chunk-size", "256K", "--vfs-read-chunk-size-limit", "256K",
                  "--dir-cache-time", "1m", "--no-checksum", "--use-server-modtime"]


def missing():
    """Why the stack cannot run here, or None."""
    if not shutil.which("rclone"):
        return "rclone is not installed (scripts/deps.sh installs Debian's)"
    if not shutil.which("node"):
        return "node is not installed (scripts/deps.sh installs Debian's nodejs and npm)"
    if not os.path.isdir(NODE_MODULES):
        return "s3rver is not installed in tests/s3/node_modules (scripts/deps.sh runs npm ci there)"
    if not shutil.which("fusermount3"):
        return "fusermount3 is not installed"
    return None


def mounted(path):
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == path for line in f)


def unmount(path):
    """fusermount3 -u, then -u -z; waits (bounded) until the kernel has let go."""
    if not mounted(path):
        return
    if subprocess.run(["fusermount3", "-u", path], capture_output=True).returncode != 0:
        subprocess.run(["fusermount3", "-u", "-z", path], capture_output=True)
    for _ in range(100):
        if not mounted(path):
            return
        time.sleep(0.05)


def rclone_env():
    # rclone 1.60 refuses to start when AWS_CA_BUNDLE names a bundle it cannot load into its own
    # HTTP transport ("LoadCustomCABundleError"); the server is plain HTTP on loopback anyway.
    env = dict(os.environ)
    env.pop("AWS_CA_BUNDLE", None)
    return env


class Server:
    """s3rver in DIR, one JSON line per request in DIR/requests.log."""

    def __init__(self, workdir):
        self.dir = os.path.join(workdir, "s3rver")
        os.makedirs(self.dir, exist_ok=True)
        self.log = os.path.join(workdir, "requests.log")
        self.proc = None
        self.port = None
        self.start()

    def start(self, port=0):
        """Starts it on a free port, or on `port` (the one it had: the end of an outage)."""
        out = open(os.path.join(os.path.dirname(self.log), "s3rver.out"), "ab")
        self.proc = subprocess.Popen(["node", SERVER_JS, self.dir, self.log, BUCKET, str(port)], stdout=subprocess.PIPE,
                                     stderr=out, start_new_session=True)
        line = b""
        deadline = time.monotonic() + 30
        import select
        while time.monotonic() < deadline and not line.endswith(b"\n"):
            r, _, _ = select.select([self.proc.stdout], [], [], 1)
            if r:
                b = self.proc.stdout.read1(64) if hasattr(self.proc.stdout, "read1") else os.read(r[0].fileno(), 64)
                if not b:
                    break
                line += b
        if not line.startswith(b"port "):
            self.stop()
            raise RuntimeError(f"s3rver did not start: {line!r}; see {out.name}")
        self.port = int(line.split()[1])

    def kill(self):
        """SIGKILL, as a crashed backend: no response finishes."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()

    def mark(self):
        """A position in the request log: requests(since=mark) are those after it."""
        try:
            return os.path.getsize(self.log)
        except FileNotFoundError:
            return 0

    def requests(self, since=0):
        try:
            with open(self.log, "rb") as f:
                f.seek(since)
                data = f.read()
        except FileNotFoundError:
            return []
        return [json.loads(x) for x in data.decode().splitlines() if x.strip()]

    def totals(self, since=0, key=None):
        """(requests, body bytes sent) after `since`; GETs of object bodies only if key names a prefix."""
        reqs = self.requests(since)
        if key:
            reqs = [r for r in reqs if r["url"].split("?")[0].startswith(f"/{BUCKET}/{key}")]
        return len(reqs), sum(r["sent"] for r in reqs)


class Rclone:
    """An rclone S3 remote on the server, its uploads, and its FUSE mounts."""

    def __init__(self, server, workdir):
        self.conf = os.path.join(workdir, "rclone.conf")
        with open(self.conf, "w") as f:
            f.write(f"[s3]\ntype = s3\nprovider = Other\naccess_key_id = S3RVER\nsecret_access_key = S3RVER\n"
                    f"endpoint = http://127.0.0.1:{server.port}\nforce_path_style = true\n")
        self.workdir = workdir
        self.mounts = []

    def run(self, *args, timeout=300):
        r = subprocess.run(["rclone", "--config", self.conf, *args], capture_output=True, text=True,
                           env=rclone_env(), timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"rclone {' '.join(args)}: {r.stderr}")
        return r.stdout

    def upload(self, local, key):
        self.run("copy", local, f"s3:{BUCKET}/{key}")

    def mount(self, key="", opts=None, mnt=None):
        """rclone mount s3:BUCKET/KEY on a fresh folder; returns the folder once it answers."""
        mnt = mnt or tempfile.mkdtemp(prefix="rclone-", dir=self.workdir)
        log = mnt + ".log"
        opts = RCLONE_S3_OPTS if opts is None else opts
        proc = subprocess.Popen(["rclone", "--config", self.conf, "mount", f"s3:{BUCKET}/{key}", mnt, *opts,
                                 "--log-file", log, "-v"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=rclone_env(), start_new_session=True)
        self.mounts.append((mnt, proc))
        for _ in range(300):
            if mounted(mnt):
                return mnt
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"rclone mount did not come up: {open(log).read() if os.path.exists(log) else ''}")

    def unmount(self, mnt):
        for k, (m, proc) in enumerate(self.mounts):
            if m == mnt:
                unmount(m)
                try:  # it exits once unmounted; one whose server is gone may still be retrying
                    proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    proc.terminate()
                    try:
                        proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(timeout=10)
                del self.mounts[k]
                return

    def stop(self):
        for m, _ in list(self.mounts):
            self.unmount(m)


class Zeromount:
    """zeromount SRC MNT with its own index cache folder and log file."""

    def __init__(self, exe, src, workdir, *opts, cache=None, env=None):
        self.mnt = tempfile.mkdtemp(prefix="zm-", dir=workdir)
        self.log = self.mnt + ".log"
        e = dict(os.environ)
        e["XDG_CACHE_HOME"] = cache or tempfile.mkdtemp(prefix="cache-", dir=workdir)
        e.update(env or {})
        r = subprocess.run([exe, src, self.mnt, "--log-file", self.log, *opts], capture_output=True, text=True,
                           env=e, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"zeromount {src}: {r.stderr}")
        self.said = r.stderr  # what it said before the mount was made (then it logs to self.log)

    def messages(self):
        return self.said + (open(self.log).read() if os.path.exists(self.log) else "")

    def stats(self):
        """MNT/.zeromount/stats as {key: int} plus {'pid': {pid: bytes}}."""
        out = {"pid": {}}
        for line in open(f"{self.mnt}/.zeromount/stats").read().splitlines():
            parts = line.split()
            if parts[0] == "pid":
                out["pid"][int(parts[1])] = int(parts[3])
            elif len(parts) == 2:
                out[parts[0]] = int(parts[1])
        return out

    def stop(self):
        unmount(self.mnt)
