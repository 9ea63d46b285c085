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
    def __init__(self, base, host="127.0.0.1", extra_args=()):
        self.host = host
        self.base = base
        self.extra_args = list(extra_args)
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
                 "--initial-cluster", "t=http://%s:%d" % (self.host, peer)] + self.extra_args,
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


class EtcdCluster:
    """One or three etcd members on one host (an address of a network namespace, or of
    loopback), member k on client port base_port + 2k and peer port base_port + 2k + 1.

    `popen(cmd, **kw)` starts a member (inside a namespace: netns.Net.popen bound to a node);
    `enter()` is a context manager in which sockets are made where the members are reachable
    (Namespace.entered). Members can be stopped and resumed one by one; `endpoints` lists
    every member's HOST:PORT, in order, for cluster_formation.etcd.endpoints.N."""

    def __init__(self, base, host, members=1, base_port=2379, popen=None, enter=None):
        if members not in (1, 3):
            raise ValueError("one or three members")
        self.base = base
        self.host = host
        self.members = members
        self.base_port = base_port
        self._popen = popen or subprocess.Popen
        self._enter = enter
        self.procs = [None] * members

    def client_port(self, k):
        return self.base_port + 2 * k

    @property
    def endpoints(self):
        return ["%s:%d" % (self.host, self.client_port(k)) for k in range(self.members)]

    def _cmd(self, binary, k):
        name = "e%d" % k
        cluster = ",".join("e%d=http://%s:%d" % (j, self.host, self.client_port(j) + 1)
                           for j in range(self.members))
        return [binary, "--name", name, "--data-dir", os.path.join(self.base, "etcd-" + name),
                "--listen-client-urls", "http://%s:%d" % (self.host, self.client_port(k)),
                "--advertise-client-urls", "http://%s:%d" % (self.host, self.client_port(k)),
                "--listen-peer-urls", "http://%s:%d" % (self.host, self.client_port(k) + 1),
                "--initial-advertise-peer-urls",
                "http://%s:%d" % (self.host, self.client_port(k) + 1),
                "--initial-cluster", cluster, "--initial-cluster-state", "new",
                "--initial-cluster-token", "sluice-test",
                # a busy 2-core machine: the defaults (100 ms, 1 s) elect needlessly
                "--heartbeat-interval", "200", "--election-timeout", "2000"]

    def start(self, timeout=30.0):
        binary = shutil.which("etcd")
        if not binary:
            raise RuntimeError("etcd not installed (Debian package etcd-server)")
        os.makedirs(self.base, exist_ok=True)
        for k in range(self.members):
            self.start_member(k, binary)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.call("/v3/kv/put", {"key": Etcd.b64("/harness/ready"),
                                         "value": Etcd.b64("1")})
                return self
            except OSError:
                if time.monotonic() > deadline or any(
                        p is None or p.poll() is not None for p in self.procs):
                    raise RuntimeError("etcd did not start; see %s/etcd-*.log" % self.base)
                time.sleep(0.1)

    def start_member(self, k, binary=None):
        binary = binary or shutil.which("etcd")
        with open(os.path.join(self.base, "etcd-e%d.log" % k), "ab") as log:
            self.procs[k] = self._popen(self._cmd(binary, k), stdin=subprocess.DEVNULL,
                                        stdout=log, stderr=log)

    def stop(self):
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.terminate()
        for k, p in enumerate(self.procs):
            if p is not None:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                self.procs[k] = None

    def call(self, path, body, timeout=5.0):
        """One JSON gateway call to the first member that answers."""
        last = None
        for ep in self.endpoints:
            req = urllib.request.Request("http://%s%s" % (ep, path),
                                         data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            try:
                if self._enter is None:
                    return self._open(req, timeout)
                with self._enter():
                    return self._open(req, timeout)
            except OSError as e:
                last = e
        raise last

    @staticmethod
    def _open(req, timeout):
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def get(self, key):
        r = self.call("/v3/kv/range", {"key": Etcd.b64(key)})
        kvs = r.get("kvs") or []
        return base64.b64decode(kvs[0].get("value", "")).decode() if kvs else None
