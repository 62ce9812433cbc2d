"""The course's autograder: releases student notebooks and grades submissions with nbgrader.

Modules, one job each:

* :mod:`grader.course`     -- where things are (repository, solutions, notebooks, chapters);
* :mod:`grader.course_config` -- reads ``course.toml`` and rewrites what follows from it (links, setup cells);
* :mod:`grader.settings`   -- the nbgrader configuration shared by every command;
* :mod:`grader.nbgrader_cli` -- runs one nbgrader command in a course directory;
* :mod:`grader.release`    -- regenerates ``notebooks/`` from ``solutions/`` (and checks for drift);
* :mod:`grader.collect`    -- unpacks an LMS zip into ``submitted/<student>/<assignment>/``, validating each notebook
  and keeping each student's LMS id;
* :mod:`grader.jobs`       -- one submission as a picklable job and the function that grades it in any worker;
  the GPU copy bandwidth every job is held to;
* :mod:`grader.autograde`  -- grades submissions (one job each, any Executor), resumable, verified;
* :mod:`grader.cluster`    -- the same jobs on a Ray cluster;
* :mod:`grader.sandbox`    -- the bubblewrap sandbox each submission (and its re-runs) runs in;
* :mod:`grader.freezer`    -- freezes and thaws a sandbox's processes while the judge times its yardstick;
* :mod:`grader.gpu_lock`   -- shares a GPU between graders, exclusive while timing;
* :mod:`grader.submitted_files` -- reads a submitted notebook without following a link or opening a special file;
* :mod:`grader.repair`     -- checks a submission against the release: stripped metadata, deleted tests;
* :mod:`grader.records`    -- per-submission record files (resuming a run) and the files no one may change;
* :mod:`grader.notebook_code` -- runs a solution notebook's code outside Jupyter (for the GPU scripts of tests/gpu/ and lab/);
* :mod:`grader.execute`    -- nbgrader's Execute step with a trusted-state guard, crash recovery, output cap;
* :mod:`grader.relauncher` -- what a call's launch record may hold, and where its launches are re-run alone (a second
  sandbox);
* :mod:`grader.judge_calls` -- the judge's line to the student's kernel: one call sent (the messages of
  :mod:`triton_course.exchange`), its answer held to the rules of own work, its launches re-run;
* :mod:`grader.judge_timing` -- the judge's timed rounds, each timed output checked; what a proxy carries to the
  speed checks;
* :mod:`grader.judge`      -- runs the hidden tests in the grader's process, calling the student's functions by proxy;
* :mod:`grader.phases`     -- where a submission's grading time goes (sandbox start, calls, re-runs, timing);
* :mod:`grader.feedback`   -- feedback HTML without the hidden tests;
* :mod:`grader.results`    -- grade records, ``grades.json``, the totals CSV and the summary table;
* :mod:`grader.report`     -- the instructor's HTML page: pass rates, points, speed against target, flags;
* :mod:`grader.export`     -- grades in the file Canvas or Moodle imports, matched by their ids;
* :mod:`grader.translations` -- the other editions: each chapter's prose translated (gettext catalogues), checked;
* :mod:`grader.message_catalogues` -- the helpers' messages and the notebooks' hints, extracted into one catalogue
  per language and compiled for :mod:`triton_course.i18n`;
* :mod:`grader.examples`   -- builds example submissions from answer files (demo and tests);
* :mod:`grader.new_chapter` -- ``python -m grader new-chapter``: a new chapter folder that releases, grades and
  passes CI;
* :mod:`grader.__main__`   -- the command line: ``python -m grader {release,collect,autograde,report,export,demo}``.

The instructor's guide is ``docs/instructors.md``.
"""
