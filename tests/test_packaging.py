"""The pins, the tested range, environment.yml and the install commands agree with each other."""

from __future__ import annotations

import re
import tomllib

import yaml

from tests.conftest import ROOT
from utils.versions import TESTED_RANGES, check_versions, version_tuple


def _pins(path):
    pins = {}
    for line in (ROOT / path).read_text().splitlines():
        line = line.split("#")[0].strip()
        m = re.match(r"^([A-Za-z0-9_.\-\[\]]+)==([^;\s]+)", line)
        if m:
            pins[m.group(1).split("[")[0].lower().replace("_", "-")] = m.group(2)
    return pins


def _project():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_pyproject_range_is_the_tested_range():
    deps = {re.split(r"[<>=; ]", d)[0]: d for d in _project()["dependencies"]}
    for pkg, (low, high) in TESTED_RANGES.items():
        assert f">={low},<{high}" in deps[pkg], f"pyproject.toml's {pkg} range differs from utils/versions.py"


def test_every_pin_file_pins_inside_the_tested_range():
    for name in ("requirements/cpu.txt", "requirements/gpu.txt"):
        pins = _pins(name)
        verdicts = check_versions({k: v for k, v in pins.items() if k in TESTED_RANGES})
        assert len(verdicts) == 2, f"{name} must pin torch and triton"
        assert all(v.tested for v in verdicts), [v.describe() for v in verdicts]


def test_gpu_pins_are_colabs_pairing():
    pins = _pins("requirements/gpu.txt")
    assert (pins["torch"], pins["triton"]) == ("2.11.0", "3.6.0")


def test_cpu_and_gpu_pins_agree_on_everything_but_torch_and_triton():
    cpu, gpu = _pins("requirements/cpu.txt"), _pins("requirements/gpu.txt")
    shared = (set(cpu) & set(gpu)) - {"torch", "triton"}
    assert shared, "the two pin files should share the course's other pins"
    assert {k: cpu[k] for k in shared} == {k: gpu[k] for k in shared}


def test_environment_yml_agrees_with_the_pins():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert any(str(d).startswith("python=3.11") for d in env["dependencies"])
    listed = {}
    for line in pip_section:
        m = re.match(r"^([A-Za-z0-9_.\-]+)\s*(.*)$", line)
        if m and not line.startswith("-"):
            listed[m.group(1).lower()] = m.group(2).replace(" ", "")
    cpu = _pins("requirements/cpu.txt")
    for pkg, spec in listed.items():
        if pkg in TESTED_RANGES:
            low, high = TESTED_RANGES[pkg]
            assert spec == f">={low},<{high}", f"environment.yml: {pkg}{spec} is not the tested range"
        else:
            assert spec == f"=={cpu[pkg]}", f"environment.yml pins {pkg}{spec}, requirements/cpu.txt {cpu[pkg]}"
    assert {"nbgrader", "nbval", "matplotlib", "torch", "triton"} <= set(listed)


def test_version_tuple_ignores_local_tags():
    assert version_tuple("2.11.0+cu130") == (2, 11, 0)
    assert version_tuple("3.6.0") < version_tuple("3.10")


def test_an_untested_version_is_named():
    (v,) = check_versions({"triton": "3.2.0"})
    assert not v.tested and "outside the tested range" in v.describe()


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and "make demo" in readme
    assert re.search(r"^\s*(exec\s+)?make test\b", ci, re.M), ".ci/run must run the README's test command"
    workflow = (ROOT / ".github" / "workflows" / "ci.yml").read_text()
    assert "make test" in workflow
