"""What a grading run keeps on disk: one record file per submission (so that an interrupted run
resumes where it stopped) and the files no submission may change (checked after each one)."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

from grader.results import GradeRecord


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record_path(out: Path, assignment: str, student: str) -> Path:
    return out / "records" / assignment / f"{student}.json"


def load_record(path: Path, sha: str) -> tuple[list[GradeRecord], list[str]] | None:
    """The saved records of a submission if they were made from a notebook with this SHA-256."""
    try:
        data = json.loads(path.read_text())
        if data.get("sha256") != sha:
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
