"""The operating-system sandbox in which a submission's code runs (bubblewrap, from Debian's package).

A submission runs as a Jupyter kernel inside ``bwrap``. What the kernel sees is built from nothing:

* read-only: the system (``/usr``, ``/lib*``, ``/bin``, ``/etc``), the Python installation and virtual
  environment the grader runs in, and a copy of the course's ``triton_course/`` package (nothing else of the
  course: no ``solutions/``, no ``grader/``, no tests, no gradebook, no other submission, no output folder);
* writable: a private ``/tmp`` and ``HOME`` (empty tmpfs), and one exchange folder through which the
  judge sends inputs and reads outputs (and the kernel's ZeroMQ sockets live, as ``ipc`` transport),
  mounted at the same path as outside so that both ends name its files alike;
* devices: a minimal ``/dev``, plus the NVIDIA device files when the machine has them;
* namespaces: its own PID, network (no network at all), IPC, UTS and mount namespaces; the whole process
  tree dies with bwrap (``--die-with-parent``, and PID 1 of the namespace takes every process with it).

When the grader runs as root, the kernel runs as an unprivileged user of its own (one uid per concurrent
sandbox, so that process limits are not shared), with no capabilities and ``no_new_privs``. Limits are set
with ``prlimit`` (processes, file size, open files, CPU seconds; address space on a machine without a GPU,
where it does not break CUDA's large reservations) and, where the machine lets the grader create them, a
memory cgroup and a freezer cgroup per sandbox (:class:`SandboxCgroups`), which its first process joins
before it becomes bwrap. On a GPU shared by several submissions the sandbox registers itself with the GPU's
lock, so that another submission's timed loop can freeze it (:mod:`grader.gpu_lock`, :mod:`grader.freezer`).
:func:`unavailable_reason` tells whether a sandbox can be made here, and why not.
"""

from __future__ import annotations

import compileall
import functools
import glob
import os
import shlex
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from grader.course import REPO_ROOT
from grader.freezer import _procs, _rmdir, _thaw_cgroup, _write

#: First uid used for sandboxed kernels when the grader runs as root; slot ``i`` runs as ``BASE_UID + i``.
BASE_UID = 61000
#: Where the sandbox sees the course's helpers and the exchange folder.
COURSE_MOUNT = "/course"
HOME_IN_SANDBOX = "/tmp/home"
#: Set by the grader: the memory cap of each sandbox, in bytes (default 24 GiB).
MEMORY_ENV = "COURSE_SANDBOX_MEMORY_BYTES"


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot be made on this machine; the message says why and what to do."""


@dataclass(frozen=True)
class Limits:
    """Caps on one sandbox (per submission)."""

    processes: int = 512            # RLIMIT_NPROC of the sandbox's own uid (threads count)
    file_bytes: int = 2 << 30       # RLIMIT_FSIZE: the largest file it may write
    open_files: int = 4096          # RLIMIT_NOFILE
    cpu_seconds: int = 3600         # RLIMIT_CPU
    memory_bytes: int = field(default_factory=lambda: int(os.environ.get(MEMORY_ENV, 24 << 30)))
    # memory cgroup (or RLIMIT_AS without a GPU); a cluster job sets it to what it asked its scheduler for


@functools.cache
def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def _gpu_device_files() -> list[str]:
    return sorted(set(glob.glob("/dev/nvidia*")) | set(glob.glob("/dev/dri/*")))


def _python_roots() -> list[str]:
    """Folders the interpreter and its packages live in (read-only inside)."""
    roots = {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix), sys.prefix, sys.base_prefix}
    exe = os.path.realpath(sys.executable)
    roots.add(os.path.dirname(os.path.dirname(exe)))
    return sorted(r for r in roots if r and os.path.isdir(r) and r not in ("/", "/usr"))


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def extra_site_paths() -> list[str]:
    """Folders on ``sys.path`` outside the Python installation (a ``--target`` install, say), minus the
    course checkout: they are bound read-only and put on the sandbox's PYTHONPATH."""
    roots = _python_roots() + ["/usr"]
    repo = str(REPO_ROOT)
    out = []
    for p in sys.path:
        p = os.path.realpath(p) if p else ""
        shallow = p.count("/") < 2 or p in ("/tmp", os.path.expanduser("~"))  # would shadow /tmp or HOME
        if p and os.path.isdir(p) and not shallow and not _within(p, repo) and not any(_within(p, r) for r in roots) \
                and not p.startswith(("/tmp/course-", "/proc", "/dev")) and p not in out:
            out.append(p)
    return out


def _make_cgroup(path: Path) -> Path | None:
    try:
        path.mkdir(exist_ok=True)
        return path
    except OSError:
        return None


class SandboxCgroups:
    """The cgroups of one sandbox, where the machine lets the grader make them: a memory cap, and a freezer.

    cgroup v2 (one folder under ``/sys/fs/cgroup``: ``memory.max`` when the memory controller is on, and
    ``cgroup.freeze``), or cgroup v1 (a folder in the ``memory`` hierarchy and one in the ``freezer``
    hierarchy). The sandbox's first process joins every folder before it starts bwrap (:meth:`Sandbox.wrap`),
    so everything it starts is inside. Where none can be made (a container with a read-only
    ``/sys/fs/cgroup``, a grader that is not root), :func:`freeze` stops the process tree with SIGSTOP."""

    def __init__(self, name: str, memory_limit: int):
        self.folders: list[Path] = []
        self.memory: Path | None = None
        self.freezer: tuple[str, Path] | None = None
        unified = Path("/sys/fs/cgroup")
        if (unified / "cgroup.controllers").exists():
            folder = _make_cgroup(unified / name)
            if folder is not None:
                self.folders.append(folder)
                if _write(folder / "memory.max", str(memory_limit)):
                    self.memory = folder
                if (folder / "cgroup.freeze").exists():
                    self.freezer = ("cgroup2", folder)
            return
        memory = _make_cgroup(unified / "memory" / name) if (unified / "memory" / "cgroup.procs").exists() else None
        if memory is not None:
            if _write(memory / "memory.limit_in_bytes", str(memory_limit)):
                self.folders.append(memory)
                self.memory = memory
            else:
                _rmdir(memory)
        freezer = _make_cgroup(unified / "freezer" / name) if (unified / "freezer" / "cgroup.procs").exists() else None
        if freezer is not None:
            if (freezer / "freezer.state").exists():
                self.folders.append(freezer)
                self.freezer = ("cgroup1", freezer)
            else:
                _rmdir(freezer)

    @property
    def path(self) -> Path | None:
        """The folder with the memory cap (None: no memory cgroup)."""
        return self.memory

    @property
    def procs_files(self) -> list[str]:
        return [str(f / "cgroup.procs") for f in self.folders]

    def remove(self) -> None:
        """Kill whatever is left in the sandbox's cgroups (thawed first: a frozen task dies only once thawed)
        and remove them."""
        if self.freezer is not None:
            _thaw_cgroup(*self.freezer)
        for folder in self.folders:
            _write(folder / "cgroup.kill", "1")
            for pid in _procs(folder):
                try:
                    os.kill(pid, 9)
                except (ProcessLookupError, PermissionError):
                    pass
        for folder in self.folders:
            _rmdir(folder)


@dataclass
class Sandbox:
    """One submission's sandbox: a private staging folder, and the command that wraps a kernel in bwrap."""

    slot: int
    staging: Path
    limits: Limits = field(default_factory=Limits)
    gpu: bool = False
    env: dict[str, str] = field(default_factory=dict)
    #: "kernel": the submission's Jupyter kernel; "relaunch": the process that re-runs its launches alone
    #: (grader.relauncher). Both are registered with the GPU's lock: the re-run works inside the judge's
    #: calls, but freezing the judge does not stop a process it waits for, whose kernels would otherwise
    #: run through another submission's timed loop (seen on the H200 as a same-size copy at half speed)
    role: str = "kernel"

    def __post_init__(self) -> None:
        self.course = self.staging / "course"
        self.exchange = self.staging / "exchange"
        if self.staging.exists():
            shutil.rmtree(self.staging)
        self.course.mkdir(parents=True)
        self.exchange.mkdir()
        from triton_course.links import copy_helpers  # the helpers the grader imports: a checkout's, or the wheel's

        helpers = copy_helpers(self.course)
        # compiled here, by the grader: the sandbox cannot write next to its read-only copy, and would
        # otherwise compile every module again on each import of each kernel
        compileall.compile_dir(helpers, quiet=1, workers=1)
        for p in (self.staging, self.course):
            os.chmod(p, 0o755)
        for p in self.course.rglob("*"):
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        self.uid = BASE_UID + self.slot if os.geteuid() == 0 else None
        if self.uid is not None:
            os.chown(self.exchange, self.uid, self.uid)
        os.chmod(self.exchange, 0o700)
        self.name = f"course-sandbox-{os.getpid()}-{self.slot}" + ("" if self.role == "kernel" else f"-{self.role}")
        self.cgroup = SandboxCgroups(self.name, self.limits.memory_bytes)
        self.pidfile = self.staging / "sandbox.pid"  # the grader's: not mounted in the sandbox
        self._registered: Path | None = None
        if self.gpu:  # other submissions timing on this GPU freeze it meanwhile (grader.gpu_lock)
            from grader.gpu_lock import GpuLock

            # the judge is frozen once, with the kernel's sandbox
            self._registered = GpuLock.from_env().register(self.name, self.member(judge=self.role == "kernel"))

    def member(self, judge: bool = True) -> dict:
        """What :func:`grader.freezer.freeze` needs to stop this submission from another grading process: the
        sandbox (its cgroup, or its process tree), and with ``judge`` the grading process that made it (this
        one, where the judge runs: its own GPU work, references and comparisons, stops too)."""
        mode = self.cgroup.freezer
        return {"name": self.name, "pidfile": str(self.pidfile), "owner": os.getpid(),
                "judge_pid": os.getpid() if judge else None,
                "cgroup2": str(mode[1]) if mode and mode[0] == "cgroup2" else None,
                "cgroup1": str(mode[1]) if mode and mode[0] == "cgroup1" else None}

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` (run inside) wrapped in bwrap, the privilege drop and the limits."""
        bwrap = bwrap_path()
        if bwrap is None:
            raise SandboxUnavailable(unavailable_reason() or "bwrap is not installed")
        cmd = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
               "--unshare-uts", "--hostname", "sandbox"]
        if self.uid is None:
            cmd += ["--unshare-user"]
        binds = [("--ro-bind", d) for d in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
                 if os.path.exists(d)]
        binds += [("--ro-bind", root) for root in _python_roots() + extra_site_paths()]
        cmd += ["--proc", "/proc", "--dev", "/dev", "--perms", "01777", "--tmpfs", "/tmp"]
        made: set[str] = set()
        for _, target in binds + [("--bind", str(self.exchange))]:
            # bwrap makes missing parents with mode 0700, which the sandbox's own uid could not traverse
            for parent in reversed(Path(target).parents):
                if str(parent) != "/" and str(parent) not in made:
                    made.add(str(parent))
                    cmd += ["--perms", "0755", "--dir", str(parent)]
        for flag, target in binds:
            cmd += [flag, target, target]
        cmd += ["--perms", "01777", "--dir", HOME_IN_SANDBOX, "--ro-bind", str(self.course), COURSE_MOUNT,
                "--bind", str(self.exchange), str(self.exchange), "--chdir", "/tmp"]
        if self.gpu:
            for dev in _gpu_device_files():
                cmd += ["--dev-bind", dev, dev]
            if os.path.isdir("/sys"):
                cmd += ["--ro-bind", "/sys", "/sys"]
        env = {"HOME": HOME_IN_SANDBOX, "PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin",
               "PYTHONPATH": ":".join([COURSE_MOUNT, *extra_site_paths()]), "TMPDIR": "/tmp", "MPLBACKEND": "Agg", "PYTHONNOUSERSITE": "1",
               "TRITON_CACHE_DIR": f"{HOME_IN_SANDBOX}/.triton", "MPLCONFIGDIR": f"{HOME_IN_SANDBOX}/.mpl",
               "JUPYTER_RUNTIME_DIR": str(self.exchange), "LANG": "C.UTF-8",
               # the sandbox's uid has no passwd entry: name it, or getpass.getuser() (torch's cache paths) fails
               "USER": "student", "LOGNAME": "student", "TORCHINDUCTOR_CACHE_DIR": f"{HOME_IN_SANDBOX}/.inductor"}
        env.update(self.env)
        cmd += ["--clearenv"]
        for k, v in sorted(env.items()):
            cmd += ["--setenv", k, v]
        cmd += ["--"]
        if self.uid is not None:
            cmd += [shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={self.uid}", f"--regid={self.uid}",
                    "--clear-groups", "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
        lim = self.limits
        rl = [f"--nproc={lim.processes}", f"--fsize={lim.file_bytes}", f"--nofile={lim.open_files}",
              f"--cpu={lim.cpu_seconds}", "--core=0"]
        if not self.gpu and self.cgroup.path is None:
            rl.append(f"--as={lim.memory_bytes}")
        cmd += [shutil.which("prlimit") or "/usr/bin/prlimit", *rl, "--", *argv]
        # the first process writes its pid for the freezer's SIGSTOP fallback and joins the sandbox's cgroups,
        # then becomes bwrap: every process of the sandbox starts inside them (no window to escape)
        steps = [f"echo $$ > {shlex.quote(str(self.pidfile))}"]
        steps += [f"{{ echo $$ > {shlex.quote(f)}; }} 2>/dev/null" for f in self.cgroup.procs_files]
        return ["/bin/sh", "-c", "; ".join(steps) + '; exec "$@"', "course-sandbox", *cmd]

    def close(self) -> None:
        from grader.gpu_lock import GpuLock

        GpuLock.unregister(self._registered)
        self.cgroup.remove()
        shutil.rmtree(self.staging, ignore_errors=True)

    def describe(self) -> str:
        who = f"uid {self.uid}" if self.uid is not None else "a user namespace"
        mem = "a memory cgroup" if self.cgroup.path else ("RLIMIT_AS" if not self.gpu else "no memory cap")
        return f"bubblewrap sandbox ({who}, no network, {mem})"


_PROBE_LOCK = threading.Lock()


@functools.cache
def unavailable_reason() -> str | None:
    """None if a sandbox can be made here; else one sentence saying why not and what to do."""
    if sys.platform != "linux":
        return "the sandbox needs Linux (bubblewrap); grade on a Linux machine"
    if bwrap_path() is None:
        return ("bubblewrap is not installed: `sudo apt-get install bubblewrap` (Debian/Ubuntu), "
                "or pass --unsandboxed to grade without it (every record then says so)")
    import tempfile

    with _PROBE_LOCK, tempfile.TemporaryDirectory(prefix="course-probe-") as tmp:
        os.chmod(tmp, 0o755)
        box = Sandbox(slot=999, staging=Path(tmp) / "box", gpu=False)
        try:
            proc = subprocess.run(box.wrap([sys.executable, "-c", "import os; print(os.getuid())"]),
                                  capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bubblewrap could not start a sandbox here ({exc})"
        finally:
            box.close()
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return (f"bubblewrap could not start a sandbox here: {err[0]}. On Ubuntu 24.04, unprivileged user "
                "namespaces are restricted by AppArmor: run the grader as root (sudo), or pass --unsandboxed")
    return None
