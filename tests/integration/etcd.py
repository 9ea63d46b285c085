"""A private etcd (Debian's etcd-server) for the cluster tests: one member on free loopback
ports with a temporary data directory, reached over its v3 JSON gateway."""

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request


def _free_port(host):
    s = socket.socket()
    s.bind((host, 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Etcd:
    def __init__(self, base, host="127.0.0.1"):
        self.host = host
        self.base = base
        self.proc = None
        self.port = None

    @property
    def endpoint(self):
        return "%s:%d" % (self.host, self.port)

    def start(self, timeout=20.0):
        binary = shutil.which("etcd")
        if not binary:
            raise RuntimeError("etcd not installed (Debian package etcd-server)")
        data = os.path.join(self.base, "etcd-data")
        os.makedirs(self.base, exist_ok=True)
        for attempt in range(5):
            self.port = _free_port(self.host)
            peer = _free_port(self.host)
            log = open(os.path.join(self.base, "etcd.log"), "ab")
            self.proc = subprocess.Popen(
                [binary, "--name", "t", "--data-dir", data,
                 "--listen-client-urls", "http://%s:%d" % (self.host, self.port),
                 "--advertise-client-urls", "http://%s:%d" % (self.host, self.port),
                 "--listen-peer-urls", "http://%s:%d" % (self.host, peer),
                 "--initial-advertise-peer-urls", "http://%s:%d" % (self.host, peer),
                 "--initial-cluster", "t=http://%s:%d" % (self.host, peer)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            log.close()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    self.call("/v3/kv/range", {"key": self.b64("/")})
                    return self
                except OSError:
                    time.sleep(0.05)
            self.stop()  # a port taken meanwhile, or too slow: another try
            shutil.rmtree(data, ignore_errors=True)
        raise RuntimeError("etcd did not start; see %s/etcd.log" % self.base)

    def stop(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGCONT)
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            self.proc = None

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    @staticmethod
    def b64(s):
        return base64.b64encode(s.encode()).decode()

    def call(self, path, body, timeout=5.0):
        req = urllib.request.Request("http://%s%s" % (self.endpoint, path),
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def get(self, key):
        """The value of key (str), or None."""
        r = self.call("/v3/kv/range", {"key": self.b64(key)})
        kvs = r.get("kvs") or []
        if not kvs:
            return None
        return base64.b64decode(kvs[0].get("value", "")).decode()
