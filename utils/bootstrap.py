"""The setup cell that opens every chapter notebook, kept here so that all chapters share one text.

``tests/test_notebooks.py`` checks that the first code cell of every notebook equals
:data:`SETUP_CELL`. The cell cannot import anything from the course before it has found it, so it
finds the helpers itself: an installed copy first, then this checkout (walking up from the notebook),
and on Colab or ModelScope a shallow clone of the course repository.
"""

SETUP_CELL = '''\
# Setup: run this cell first. It finds the course helpers (installed, in this checkout, or -- on Colab
# and ModelScope -- downloaded once), then picks the GPU or, without one, Triton's interpreter.
import pathlib, subprocess, sys

def course_root(repo="triton-course/triton-kernels-course"):
    here = pathlib.Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / "utils" / "bootstrap.py").exists():
            return folder
    clone = pathlib.Path.home() / repo.split("/")[1]
    if clone.exists():  # downloaded in an earlier session: bring it up to date if we can
        subprocess.run(["git", "-C", str(clone), "pull", "-q", "--ff-only"], check=False, capture_output=True)
    else:
        print("Downloading the course helpers ...")
        subprocess.run(["git", "clone", "-q", "--depth=1", f"https://github.com/{repo}", str(clone)], check=True)
    return clone

try:
    import utils
    utils.COURSE
except (ImportError, AttributeError) as error:
    if isinstance(error, ImportError) and error.name not in ("utils", None):
        raise  # the helpers are here, but a package they need (torch? triton?) is not installed
    sys.modules.pop("utils", None)
    sys.path.insert(0, str(course_root()))
    import utils

device = utils.setup()'''
