"""What a grading run keeps on disk: one record file per submission (so that an interrupted run
resumes where it stopped) and the files no submission may change (checked after each one)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
from pathlib import Path

from grader.results import GradeRecord


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record_path(out: Path, assignment: str, student: str) -> Path:
    return out / "records" / assignment / f"{student}.json"


def run_secret(out: Path) -> bytes:
    """The run's secret (``DIR/.grader-secret``, readable by the instructor only), made on first use.

    It seeds every submission's inputs (:func:`submission_seed`) and signs every record
    (:func:`sign_record`), so a rerun in the same folder reproduces the inputs and no record that the
    grader did not write is ever taken for a finished grade. The sandbox never sees ``DIR``."""
    path = out / ".grader-secret"
    if path.is_file() and len(path.read_text().strip()) == 64:
        return bytes.fromhex(path.read_text().strip())
    secret = os.urandom(32)
    path.write_text(secret.hex() + "\n")
    os.chmod(path, 0o600)
    return secret


def submission_seed(secret: bytes, assignment: str, student: str) -> str:
    """The hex seed of one submission's judge (derived; the run secret itself never leaves the grader)."""
    return hmac.new(secret, f"seed/{assignment}/{student}".encode(), hashlib.sha256).hexdigest()


def _signature(record: dict, secret: bytes) -> str:
    body = json.dumps({k: v for k, v in record.items() if k != "signature"}, sort_keys=True).encode()
    return hmac.new(secret, b"record/" + body, hashlib.sha256).hexdigest()


def sign_record(record: dict, secret: bytes) -> bytes:
    return (json.dumps({**record, "signature": _signature(record, secret)}, indent=1) + "\n").encode()


def run_info(sandboxed: bool) -> dict[str, str]:
    """What a regrade needs to reproduce a record: the course commit, the GPU and the versions."""
    import platform
    import subprocess

    from grader.course import REPO_ROOT

    info = {"python": platform.python_version(), "sandboxed": str(sandboxed)}
    try:
        git = ["git", "-C", str(REPO_ROOT)]
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run([*git, "status", "--porcelain", "--", "solutions", "utils", "grader"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        info["course_commit"] = (head + ("+uncommitted-changes" if dirty else "")) if head else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        info["course_commit"] = "unknown"
    for mod in ("torch", "triton", "nbgrader", "numpy"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:
            info[mod] = "absent"
    try:
        import torch

        info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (Triton interpreter)"
    except Exception:
        info["gpu"] = "unknown"
    return info


def load_record(path: Path, sha: str, secret: bytes | None = None) -> tuple[list[GradeRecord], list[str]] | None:
    """The saved records of a submission if they were made from a notebook with this SHA-256 (and, given
    the run's secret, if the grader signed them)."""
    try:
        data = json.loads(path.read_text())
        if data.get("sha256") != sha:
            return None
        if secret is not None and not hmac.compare_digest(str(data.get("signature", "")), _signature(data, secret)):
            return None
        return [GradeRecord(**r) for r in data["records"]], list(data.get("notes", []))
    except Exception:
        return None


class Protected:
    """Files a submission must not change: the submitted notebooks and the record files."""

    def __init__(self) -> None:
        self.files: dict[Path, bytes] = {}
        self.lock = threading.Lock()

    def write(self, path: Path, data: bytes) -> None:
        with self.lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            self.files[path] = data

    def remember(self, path: Path, data: bytes) -> None:
        with self.lock:
            self.files[path] = data

    def verify(self) -> list[str]:
        """Put back every protected file that changed; return their paths."""
        changed = []
        with self.lock:
            for path, data in self.files.items():
                try:
                    same = path.read_bytes() == data
                except OSError:
                    same = False
                if not same:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(data)
                    changed.append(str(path))
        return changed
