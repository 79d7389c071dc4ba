"""The wheel: it builds, ships the grammar and the bundled rulesets, installs, and its ``fxrules`` command works.

The wheel is built from a snapshot copy of the project (so the build leaves no ``build/`` or ``*.egg-info`` behind in
the checkout) and installed with ``--no-deps`` into a fresh virtual environment made with
``--system-site-packages``, so torch, lark and attrs come from the running environment and are not downloaded.
Every command runs from a temporary working directory with ``PYTHONPATH`` removed, and the tests check that the
``fxrules`` imported there is the wheel's copy inside the venv, not the editable checkout.

The tests that build or install are marked ``slow`` (about 25 s together; CI runs slow tests too).

Building: without build isolation when the running environment has setuptools >= 77 (offline and fast);
otherwise ``python -m build`` makes an isolated build environment, which needs PyPI.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent
TIMEOUT = 600

#: ``project.license = "SPDX expression"`` (PEP 639) is accepted by setuptools from version 77 on.
LICENSE_EXPRESSION_SETUPTOOLS = (77, 0)


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False)


def _version_tuple(text: str) -> tuple[int, int]:
    major, minor = ([int(part) for part in re.findall(r"\d+", text)[:2]] + [0, 0])[:2]
    return major, minor


def _setuptools_version() -> tuple[int, ...] | None:
    try:
        import setuptools
    except ImportError:
        return None
    return _version_tuple(setuptools.__version__)


def _clean_env() -> dict[str, str]:
    """The environment for commands in the venv: no PYTHONPATH (it could point at the checkout)."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP"}}
    env["PYTHONNOUSERSITE"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A snapshot of the project, without VCS data, build leftovers and caches."""
    target = tmp_path_factory.mktemp("source") / "fxrules-src"
    shutil.copytree(
        PROJECT, target,
        ignore=shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                                      ".ruff_cache", ".hypothesis", ".venv*", "*.pyc", ".benchmarks"),
    )
    return target


@pytest.fixture(scope="module")
def wheel(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("build", reason="'build' is in the test extra: pip install -e .[test]")
    outdir = tmp_path_factory.mktemp("wheelhouse")
    command = [sys.executable, "-m", "build", "--wheel", "--outdir", str(outdir)]
    version = _setuptools_version()
    if version is not None and version >= LICENSE_EXPRESSION_SETUPTOOLS:
        command.append("--no-isolation")  # offline: use the setuptools already installed
    result = _run([*command, str(source)], cwd=source)
    assert result.returncode == 0, f"wheel build failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    wheels = list(outdir.glob("fxrules-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def _site_packages(python: Path) -> Path:
    result = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                  cwd=python.parent, env=_clean_env())
    assert result.returncode == 0, result.stderr
    return Path(result.stdout.strip())


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv (system site packages visible) with the wheel installed; yields its bin directory."""
    root = tmp_path_factory.mktemp("venv") / "env"
    created = _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(root)],
                   cwd=root.parent)
    scripts = root / ("Scripts" if os.name == "nt" else "bin")
    python = scripts / ("python.exe" if os.name == "nt" else "python")
    if created.returncode != 0 or not python.exists():
        pytest.skip(f"cannot create a virtual environment here: {created.stderr.strip() or created.stdout.strip()}")

    # If this test runs inside a venv itself, '--system-site-packages' exposes the BASE interpreter's packages,
    # not this environment's: make torch, lark, attrs, hypothesis and pip visible with a .pth file.  (Paths a .pth
    # file lists are added to sys.path but their own .pth files -- such as an editable install's finder -- are not
    # run, and they come after the venv's site-packages, so the wheel's fxrules still wins.)
    probe = "import torch, lark, attrs, hypothesis, pip"
    if _run([str(python), "-c", probe], cwd=root, env=_clean_env()).returncode != 0:
        import attrs
        import hypothesis
        import lark
        import pip
        import torch

        modules = (torch, lark, attrs, hypothesis, pip)
        dirs = dict.fromkeys(str(Path(m.__file__).resolve().parent.parent) for m in modules)
        (_site_packages(python) / "_outer_environment.pth").write_text("\n".join(dirs) + "\n", encoding="utf-8")
        result = _run([str(python), "-c", probe], cwd=root, env=_clean_env())
        assert result.returncode == 0, f"the venv cannot import the dependencies:\n{result.stderr}"

    # --ignore-installed: never touch (uninstall) an fxrules installed outside the venv, e.g. the editable one.
    installed = _run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed",
                      str(wheel)], cwd=root, env=_clean_env())
    assert installed.returncode == 0, f"pip install of the wheel failed:\n{installed.stdout}\n{installed.stderr}"
    yield scripts


def _rule_count(path: Path) -> int:
    return len(re.findall(r"^rule\s+\w+", path.read_text(encoding="utf-8"), re.MULTILINE))


@pytest.mark.slow  # builds the wheel / runs a fresh venv: ~25 s for the module
def test_wheel_contains_grammar_and_rulesets(wheel: Path, source: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert "fxrules/grammar/fxr.lark" in names
        for ruleset in ("prelude.fxr", "algebra.fxr", "fusions.fxr"):
            assert f"fxrules/rulesets/{ruleset}" in names
        # the shipped data are the project's files, byte for byte
        assert archive.read("fxrules/grammar/fxr.lark") == (source / "grammar" / "fxr.lark").read_bytes()
        for path in (source / "rulesets").glob("*.fxr"):
            assert archive.read(f"fxrules/rulesets/{path.name}") == path.read_bytes()
        # the console script
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert re.search(r"^fxrules\s*=\s*fxrules\.cli:main$", archive.read(entry_points).decode(), re.MULTILINE)
        # no stray top-level folders (grammar/, rulesets/, tests/): the data live only inside the fxrules package
        assert {name.split("/")[0] for name in names} == {"fxrules", entry_points.split("/")[0]}


@pytest.mark.slow  # builds the wheel / runs a fresh venv: ~25 s for the module
def test_installed_wheel_is_what_the_venv_imports(venv: Path, tmp_path: Path) -> None:
    """Guard for the tests below: the venv runs the wheel's fxrules and data, not the editable checkout."""
    script = (
        "import fxrules, sys\n"
        "from importlib import resources\n"
        "from fxrules.lang import bundled\n"
        "print(fxrules.__file__)\n"
        "print(resources.files('fxrules.grammar').joinpath('fxr.lark'))\n"
        "print(resources.files('fxrules.rulesets').joinpath('prelude.fxr'))\n"
        "print(len(bundled.grammar_text()) > 0, bundled.ruleset_names())\n"
    )
    result = _run([str(venv / "python"), "-c", script], cwd=tmp_path, env=_clean_env())
    assert result.returncode == 0, result.stderr
    module, grammar, prelude, summary = result.stdout.splitlines()
    root = venv.parent.resolve()
    for path in (module, grammar, prelude):
        assert Path(path).resolve().is_relative_to(root), f"{path} is not inside the venv {root}"
        assert not Path(path).resolve().is_relative_to(PROJECT), f"{path} is the checkout's copy"
    assert Path(grammar).is_file() and Path(prelude).is_file()
    shipped = sorted(p.name for p in (PROJECT / "rulesets").glob("*.fxr") if p.name != "prelude.fxr")
    assert summary == f"True {shipped}"


@pytest.mark.slow  # builds the wheel / runs a fresh venv: ~25 s for the module
def test_installed_console_script_checks_the_bundled_rulesets(venv: Path, source: Path, tmp_path: Path) -> None:
    result = _run([str(venv / "fxrules"), "check", "algebra.fxr", "fusions.fxr"], cwd=tmp_path, env=_clean_env())
    assert result.returncode == 0, result.stderr
    expected = [f"{name}: {_rule_count(source / 'rulesets' / name)} rules, 0 errors"
                for name in ("algebra.fxr", "fusions.fxr")]
    assert result.stdout.splitlines() == expected, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow  # builds the wheel / runs a fresh venv: ~25 s for the module
def test_installed_console_script_lists_the_bundled_rulesets(venv: Path, source: Path, tmp_path: Path) -> None:
    result = _run([str(venv / "fxrules"), "list"], cwd=tmp_path, env=_clean_env())
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for name in ("algebra.fxr", "fusions.fxr"):
        path = source / "rulesets" / name
        assert re.search(rf"^{re.escape(name)}: {_rule_count(path)} rules$", out, re.MULTILINE), out
        for rule in re.findall(r"^rule\s+(\w+)", path.read_text(encoding="utf-8"), re.MULTILINE):
            assert re.search(rf"^  {rule}\b", out, re.MULTILINE), f"{rule} missing from:\n{out}"
    assert "prelude.fxr" not in out


def test_build_backend_requirement_supports_the_license_expression() -> None:
    """pyproject uses ``license = "Apache-2.0"`` (a PEP 639 expression): setuptools < 77 rejects it.

    So ``[build-system] requires`` must ask for ``setuptools>=77``; with ``>=69`` a build environment that
    resolves to setuptools 69-76 (e.g. a pinned or offline mirror) fails with "project.license must be valid
    exactly by one definition".
    """
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((PROJECT / "pyproject.toml").read_text(encoding="utf-8"))
    if not isinstance(config["project"].get("license"), str):
        return
    requirements = [r for r in config["build-system"]["requires"] if re.match(r"setuptools\b", r)]
    assert requirements, "setuptools missing from [build-system] requires"
    lower = re.search(r">=\s*([\d.]+)", requirements[0])
    assert lower, f"no lower bound on setuptools: {requirements[0]}"
    assert _version_tuple(lower.group(1)) >= LICENSE_EXPRESSION_SETUPTOOLS, requirements[0]
