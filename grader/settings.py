"""The nbgrader configuration of the course, applied by ``nbgrader_config.py`` files.

The repository root is itself an nbgrader course directory (``solutions/`` is the source directory and
``notebooks/`` the release directory), so plain ``nbgrader`` commands work there; the grader builds
its own throw-away course directories with the same settings.
"""

from __future__ import annotations

#: Seconds one cell may run before it is interrupted. Generous: under Triton's interpreter a hidden test
#: cell takes seconds, and on a GPU the first call of a kernel includes its compilation.
CELL_TIMEOUT_S = 300

CODE_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"


def configure(c) -> None:
    """Apply the course's settings to a traitlets config object ``c``."""
    c.CourseDirectory.course_id = "triton-kernels-course"
    c.CourseDirectory.source_directory = "solutions"
    c.CourseDirectory.release_directory = "notebooks"
    # A chapter's folder also holds its tests, answer files (a correct one among them), measuring script and
    # records: only its notebook is an assignment file, released to students or copied for grading.
    # (nbgrader's generate_assignment copies every file of the folder that ``ignore`` does not match.)
    c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*.py", "*.json", "*.md",
                                "submissions", "records"]
    c.ClearSolutions.code_stub = {"python": CODE_STUB}
    c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
    c.Execute.timeout = CELL_TIMEOUT_S
    c.Execute.interrupt_on_timeout = True
    # The student's kernel is killed, not asked to shut down: it is untrusted, its sandbox goes with it, and a
    # polite shutdown cost 0.7 s of every submission's grading on the CPU (more on a GPU, which tears down a context).
    c.Execute.shutdown_kernel = "immediate"
    # A student who deleted a test cell gets it back rather than silently skipping it.
    c.OverwriteCells.add_missing_cells = True
    _configure_grading(c)


def _configure_grading(c) -> None:
    """Autograde with :class:`grader.execute.CourseExecute`; feedback without the hidden tests."""
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, GetGrades, IgnorePattern,
                                        LimitOutput, SaveAutoGrades)

    from grader.execute import CourseExecute
    from grader.feedback import HideTestSource, SafeOutputs

    # nbgrader 0.9's list, with Execute replaced
    c.Autograde.autograde_preprocessors = [CourseExecute, IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
                                           SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]
    c.LimitOutput.max_lines = 400
    c.GenerateFeedback.preprocessors = [GetGrades, HideTestSource, SafeOutputs, CSSHTMLHeaderPreprocessor]
