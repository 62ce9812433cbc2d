"""The course's autograder: releases student notebooks and grades submissions with nbgrader.

Modules, one job each:

* :mod:`grader.course`     -- where things are (repository, solutions, notebooks, chapters);
* :mod:`grader.settings`   -- the nbgrader configuration shared by every command;
* :mod:`grader.nbgrader_cli` -- runs one nbgrader command in a course directory;
* :mod:`grader.release`    -- regenerates ``notebooks/`` from ``solutions/`` (and checks for drift);
* :mod:`grader.autograde`  -- grades one submission in its own workspace and reads back the scores;
* :mod:`grader.results`    -- grade records, ``grades.json``, the totals CSV and the summary table;
* :mod:`grader.examples`   -- builds example submissions from answer files (demo and tests);
* :mod:`grader.__main__`   -- the command line: ``python -m grader {release,autograde,demo}``.
"""
