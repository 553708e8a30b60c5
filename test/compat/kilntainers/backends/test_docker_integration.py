"""`get_docker_backend(engine)` as Kilntainers' tests use it: skips the test when no engine
answers, the way the original does when the engine's CLI or daemon is missing. It checks the
engine the kilntainers CLI would use (its Docker API socket), not a CLI binary."""

import os
import socket

import pytest


class DockerBackend:
    def __init__(self, engine: str, socket_path: str):
        self.engine = engine
        self.socket_path = socket_path


def _socket_path(engine: str) -> str:
    host = os.environ.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        return host[len("unix://"):]
    if engine == "podman":
        runtime = os.environ.get("XDG_RUNTIME_DIR", "/run")
        return os.path.join(runtime, "podman", "podman.sock")
    return "/var/run/docker.sock"


def _ping(path: str) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(path)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return sock.recv(64).split(b" ")[1:2] == [b"200"]
    except OSError:
        return False


async def get_docker_backend(engine: str) -> DockerBackend:
    path = _socket_path(engine)
    if not _ping(path):
        pytest.skip(f"{engine} daemon not running")
    return DockerBackend(engine, path)
