"""The Chinese edition: complete, current, generated from the English, graded the same.

The catalogues are checked as CI must check them (a missing, fuzzy or stale translation fails and names its
cell); the staleness rules are shown to catch what they are for on a copy of a chapter whose English changed;
the generated Chinese notebooks are shown to share every code cell, grade id and checksum with the English.
Grading the Chinese release (model answers: full marks; stubs: nothing) is in tests/test_autograde.py; the
browser test of a Chinese notebook in tests/test_browser.py; the helpers' messages in
tests/test_message_catalogue.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import nbformat
import pytest
from nbgrader.utils import compute_checksum

from grader.course import student_notebook
from grader.translations import (BADGES_TOKEN, GLOSSARY_CELL_ID, TRANSLATED, catalogue_path, document_problems,
                                 english_cells, glossary_path, glossary_rows, problems, read_catalogue, update,
                                 write_catalogue)
from tests.conftest import CHAPTERS, ROOT
from triton_course.bootstrap import setup_cell
from triton_course.links import CONFIG, badges

ZH = "zh_CN"
CJK = re.compile(r"[\u4e00-\u9fff]")
COURSE_GLOSSARY = ROOT / "docs" / "zh" / "glossary.md"


def _zh_notebook(chapter: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "notebooks" / TRANSLATED[ZH] / chapter / f"{chapter}.ipynb", as_version=4)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_chapter_is_translated_and_current(chapter):
    found = problems(chapter, ZH)
    assert not found, "\n".join(map(str, found)) + \
        "\nrun `python -m grader translations update`, translate what it lists (docs/zh/TRANSLATING.md)"


def test_the_translated_documents_are_current():
    found = document_problems()
    assert not found, "\n".join(found)


def _copy_chapter(chapter: str, tmp_path):
    """A copy of the chapter's English student notebook and its catalogue, to change freely."""
    notebooks = tmp_path / "notebooks"
    shutil.copytree(ROOT / "notebooks" / chapter, notebooks / chapter)
    po = tmp_path / "translations" / f"{ZH}.po"
    po.parent.mkdir()
    shutil.copy2(catalogue_path(chapter, ZH), po)
    shutil.copy2(glossary_path(chapter, ZH), po.with_name(f"glossary.{ZH}.md"))
    return notebooks, po


def test_a_changed_english_cell_is_stale_then_fuzzy_with_its_old_translation_kept(tmp_path):
    chapter = "03_vector_add"
    notebooks, po = _copy_chapter(chapter, tmp_path)
    assert problems(chapter, ZH, notebooks, po) == []
    path = notebooks / chapter / f"{chapter}.ipynb"
    nb = nbformat.read(path, as_version=4)
    cell = [c for c in nb.cells if c.cell_type == "markdown"][2]
    old_translation = next(m.string for m in read_catalogue(po) if m.context == cell.id)
    cell.source = cell.source + "\n\nOne more English sentence."
    nbformat.write(nb, path)

    found = problems(chapter, ZH, notebooks, po)
    assert [(p.cell, p.what.split(":")[0]) for p in found] == [(cell.id, "stale")]

    update(chapter, ZH, notebooks, po)
    message = next(m for m in read_catalogue(po) if m.context == cell.id)
    assert message.fuzzy and message.string == old_translation and "One more English sentence." in message.id
    written = po.read_bytes()   # a second update changes nothing, and leaves no mangled old-English comments
    update(chapter, ZH, notebooks, po)
    assert po.read_bytes() == written and b"\n# |" not in written
    assert [(p.cell, p.what.split(":")[0]) for p in problems(chapter, ZH, notebooks, po)] == [(cell.id, "fuzzy")]

    # a new English cell appears untranslated; once translated and unflagged, the chapter is complete again
    nb.cells.insert(3, nbformat.v4.new_markdown_cell("A new paragraph.", id="new-cell"))
    nbformat.write(nb, path)
    update(chapter, ZH, notebooks, po)
    assert {(p.cell, p.what) for p in problems(chapter, ZH, notebooks, po)} == {
        (cell.id, "fuzzy: the English changed; revise the translation and remove the fuzzy flag"),
        ("new-cell", "not translated")}
    catalog = read_catalogue(po)
    for m in catalog:
        if m.context in (cell.id, "new-cell"):
            m.string = m.string or "新的一段。"
            m.flags.discard("fuzzy")
    write_catalogue(catalog, po)
    assert problems(chapter, ZH, notebooks, po) == []


def test_a_translation_that_edits_code_or_drops_the_links_is_refused(tmp_path):
    chapter = "03_vector_add"
    notebooks, po = _copy_chapter(chapter, tmp_path)
    catalog = read_catalogue(po)
    header = next(m for m in catalog if m.id and BADGES_TOKEN in m.id)
    fenced = next(m for m in catalog if m.id and "```" in m.id)
    header.string = header.string.replace(BADGES_TOKEN, "")
    fenced.string = fenced.string.replace("program 0", "程序 0", 1)
    write_catalogue(catalog, po)
    found = {(p.cell, p.what.split(" ")[0]) for p in problems(chapter, ZH, notebooks, po)}
    assert (header.context, "the") in found and any(cell == fenced.context for cell, _ in found), found
    assert len(found) == 2, found


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_chinese_notebook_shares_every_code_cell_grade_id_and_checksum(chapter):
    english = nbformat.read(student_notebook(chapter), as_version=4)
    chinese = _zh_notebook(chapter)
    assert [c.id for c in chinese.cells] == [c.id for c in english.cells] + [GLOSSARY_CELL_ID]
    assert chinese.metadata["course"] == {"language": ZH}
    for en, zh in zip(english.cells, chinese.cells):
        assert en.cell_type == zh.cell_type
        meta_en, meta_zh = en.metadata.get("nbgrader", {}), zh.metadata.get("nbgrader", {})
        assert {k: v for k, v in meta_en.items() if k != "checksum"} == \
            {k: v for k, v in meta_zh.items() if k != "checksum"}, zh.id
        if "checksum" in meta_zh:   # nbgrader's validate and autograde accept the Chinese cell as released
            assert meta_zh["checksum"] == compute_checksum(zh), zh.id
        if zh.cell_type == "code":
            if meta_en.get("grade_id") == "setup":
                assert zh.source == setup_cell(CONFIG, ZH) and "LANGUAGE = 'zh_CN'" in zh.source
            else:
                assert zh.source == en.source, f"code cell {zh.id} differs from the English"
            if meta_en.get("grade"):
                assert meta_zh["checksum"] == meta_en["checksum"], "a test cell's checksum must be the English one"
        else:
            assert CJK.search(zh.source), f"markdown cell {zh.id} holds no Chinese"
    header = chinese.cells[0].source
    assert badges(chapter, CONFIG, ZH) in header and badges(chapter, CONFIG) not in header
    assert glossary_rows(glossary_path(chapter, ZH)) and "术语" in chinese.cells[-1].source


def _course_terms() -> dict[str, str]:
    return {english.lower(): chinese for english, chinese, _ in glossary_rows(COURSE_GLOSSARY)}


def test_the_course_glossary_has_the_fields_terms():
    terms = _course_terms()
    for english, chinese in (("shared memory", "共享内存"), ("occupancy", "占用率"), ("memory bandwidth", "访存带宽"),
                             ("fusion / fused kernel", "算子融合 / 融合 kernel")):
        assert terms.get(english) == chinese, (english, terms.get(english))
    assert len(terms) >= 50


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_chapters_glossary_uses_the_courses_terms(chapter):
    course = _course_terms()
    rows = glossary_rows(glossary_path(chapter, ZH))
    assert 5 <= len(rows) <= 30, f"{chapter}: {len(rows)} glossary rows"
    differ = [(english, chinese, course[english.lower()]) for english, chinese, _ in rows
              if english.lower() in course and chinese != course[english.lower()]]
    assert not differ, f"{chapter}'s glossary disagrees with docs/zh/glossary.md: {differ}"


def test_every_english_markdown_cell_has_a_message():
    """The catalogue's unit is the cell: every markdown cell of every chapter is one message."""
    for chapter in CHAPTERS:
        cells = english_cells(chapter)
        ids = [m.context for m in read_catalogue(catalogue_path(chapter, ZH)) if m.id]
        assert ids == [cell_id for cell_id, _ in cells], chapter


def test_the_chinese_setup_cell_finds_the_helpers_and_speaks_chinese(tmp_path):
    """The Chinese setup cell, run as a script from a Chinese notebook's folder, finds this checkout, prints
    in Chinese and leaves the helpers speaking Chinese; edited to "en", English."""
    cwd = ROOT / "notebooks" / TRANSLATED[ZH] / "03_vector_add"
    probe = "\nfrom triton_course.i18n import current_language\nprint('LANGUAGE-NOW', current_language())\n"
    for language, expect in ((ZH, "zh_CN"), ("en", "en")):
        cell = setup_cell(CONFIG, ZH)
        if language == "en":
            cell = cell.replace("LANGUAGE = 'zh_CN'", "LANGUAGE = 'en'")   # the student's one-line switch
        script = tmp_path / f"setup_{language}.py"
        script.write_text(cell + probe)
        run = subprocess.run([sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, timeout=300,
                             env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONNOUSERSITE": "1"})
        assert run.returncode == 0, run.stderr[-3000:]
        assert f"LANGUAGE-NOW {expect}" in run.stdout, run.stdout
        found_line = next(line for line in run.stdout.splitlines() if "triton_course" in line)
        assert CJK.search(found_line), f"the setup cell's message should be Chinese: {found_line!r}"


def test_a_translated_document_goes_stale_when_its_students_part_changes(tmp_path):
    """docs/zh/README.md translates the README's students' sections: an edit there makes it stale, an edit of an
    instructors' section or of what `grader config` generates (version, links) does not."""
    for name in ("README.md", "docs/students.md", "docs/zh/README.md", "docs/zh/students.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    assert document_problems(tmp_path) == []
    readme = tmp_path / "README.md"
    text = readme.read_text()
    readme.write_text(text.replace("## For instructors\n", "## For instructors\n\nA new instructors' paragraph.\n")
                      .replace(f"=={CONFIG.version}", "==99.0"))
    assert document_problems(tmp_path) == []
    readme.write_text(text.replace("## Which GPU\n", "## Which GPU\n\nA new sentence for students.\n"))
    assert [p.split(":")[0] for p in document_problems(tmp_path)] == ["docs/zh/README.md"]
