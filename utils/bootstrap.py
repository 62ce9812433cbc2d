"""The setup cell that opens every chapter notebook, generated from ``course.toml``.

The cell cannot import anything of the course before it has found it, so its logic is in its own text.
It tries, in order, and says which it used:

1. an installed copy of the helpers of the notebook's version (``pip install``, the grader's sandbox, an
   editable install of a checkout);
2. this checkout: a folder above the notebook holding ``course.toml`` and the helpers' folder ``utils/``
   (any version), imported under the helpers' own name, so a student's ``utils`` never shadows them;
3. ``pip install <student package>==<version>``: pip uses the index or mirror the platform configures
   (``PIP_INDEX_URL``, ``pip.conf``; ModelScope's instances point at a mirror in mainland China);
4. a shallow clone of the repository into the home folder, made under a ``.partial`` name and renamed
   when complete, so that a failed clone is cleared by the next run.

When all fail it raises one short message saying what to run. ``tests/test_notebooks.py`` checks that
the first code cell of every notebook equals :data:`SETUP_CELL`; ``python -m grader config --apply``
writes it into every notebook.
"""

from __future__ import annotations

from .i18n import N_, SOURCE_LANGUAGE, normalise, translations
from .links import CONFIG, CourseConfig

#: The setup cell's words, translated into the notebook's edition when the cell is generated. ``{pkg}``,
#: ``{version}`` and ``{mirror}`` are filled in then; ``{DIST}``, ``{VERSION}``, ``{REPO}``, ``{folder}``,
#: ``{clone}``, ``{PKG}``, ``{course.__version__}`` and ``{source}`` are the cell's own f-string fields and must stay as they are.
MESSAGES = {
    "comment": N_("Setup: run this cell first. It finds the course helpers ({pkg} {version}): installed, in this "
                  "checkout,\ninstalled now with pip, or cloned; then picks the GPU or, without one, Triton's "
                  "interpreter."),
    "language": N_('the language of the helpers\' messages: "en" (English) or "zh_CN" (Chinese)'),
    "help": N_("Could not install or download the course helpers. In a terminal, run `pip install "
               "{DIST}=={VERSION}` (in mainland China, add `-i {mirror}`), then run this cell again."),
    "installed": N_("the installed copy, {folder}"),
    "checkout": N_("this checkout, {folder}"),
    "installing": N_("Installing {DIST}=={VERSION} with pip ..."),
    "pip": N_("pip install {DIST}=={VERSION}"),
    "downloading": N_("Downloading the course helpers from {REPO} ..."),
    "clone": N_("a clone of {REPO} in {clone}"),
    "found": N_("Course helpers {PKG} {course.__version__}: {source}"),
}

TEMPLATE = '''\
{comment}
import importlib, importlib.util, pathlib, shutil, subprocess, sys
PKG, VERSION, DIST = {pkg!r}, {version!r}, {dist!r}
REPO, BRANCH = {repo!r}, {branch!r}
LANGUAGE = {language!r}  # {language_comment}
HELP = f{help}

def forget():
    for name in [m for m in sys.modules if m.split(".")[0] == PKG]:
        del sys.modules[name]
    importlib.invalidate_caches()

def installed():
    \"\"\"The installed helpers, if they are of this notebook's version.\"\"\"
    loaded = sys.modules.get(PKG)
    if loaded and getattr(loaded, "__version__", None) == VERSION:
        return loaded  # imported already (this cell's second run, the grader): keep the classes it made
    forget()
    try:
        module = importlib.import_module(PKG)
    except ImportError as error:
        if error.name != PKG:
            raise  # the helpers are here, but a package they need (torch? triton?) is not installed
        return None
    return module if getattr(module, "__version__", None) == VERSION else None

def checkout(folder):
    \"\"\"The helpers of a checkout of the course (its utils/ folder, imported as PKG), or None.\"\"\"
    init = folder / "utils" / "__init__.py"
    if not (init.is_file() and (folder / "course.toml").is_file()):
        return None
    loaded = sys.modules.get(PKG)
    if loaded and pathlib.Path(loaded.__file__) == init:
        return loaded
    forget()
    spec = importlib.util.spec_from_file_location(PKG, init, submodule_search_locations=[str(init.parent)])
    module = sys.modules[PKG] = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        forget()
        raise
    return module

def find_helpers():
    if course := installed():
        folder = pathlib.Path(course.__file__).parent
        return course, f{installed}
    for folder in (here := pathlib.Path.cwd().resolve(), *here.parents):
        if course := checkout(folder):
            return course, f{checkout}
    print(f{installing})
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"{{DIST}}=={{VERSION}}"])
    if pip.returncode == 0 and (course := installed()):
        return course, f{pip}
    clone = pathlib.Path.home() / REPO.rstrip("/").rsplit("/", 1)[-1]
    if not (clone / "utils" / "__init__.py").exists():  # none yet, or a broken one: clone afresh
        partial = clone.with_name(clone.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        print(f{downloading})
        git = subprocess.run(["git", "clone", "-q", "--depth=1", "-b", BRANCH, REPO, str(partial)])
        if git.returncode != 0 or not (partial / "utils" / "__init__.py").exists():
            raise RuntimeError(HELP) from None
        shutil.rmtree(clone, ignore_errors=True)
        partial.rename(clone)
    if course := checkout(clone):
        return course, f{clone}
    raise RuntimeError(HELP) from None

course, source = find_helpers()
print(f{found})
import {pkg}
device = {pkg}.setup(language=LANGUAGE)'''


def _literal(text: str) -> str:
    """``text`` as the body of an f-string literal (its ``{fields}`` left for the cell to fill)."""
    return repr(text)


def setup_cell(config: CourseConfig = CONFIG, language: str = SOURCE_LANGUAGE) -> str:
    """The text of the setup cell for the course ``config`` describes, in the edition of ``language``."""
    code = normalise(language)
    tr = translations(code).gettext
    comment = tr(MESSAGES["comment"]).replace("{pkg}", config.import_name).replace("{version}", config.version)
    words = {key: _literal(tr(MESSAGES[key]).replace("{mirror}", config.mirror))
             for key in MESSAGES if key not in ("comment", "language")}
    return TEMPLATE.format(comment="\n".join(f"# {line}" for line in comment.splitlines()),
                           pkg=config.import_name, version=config.version, dist=config.student_package,
                           repo=config.repo_url, branch=config.branch, language=code,
                           language_comment=tr(MESSAGES["language"]), **words)

SETUP_CELL = setup_cell()
