"""``laytune --import MODULE`` and ``LAYTUNE_IMPORT``: a user's module of
operators, imported before the command runs, so that ``tune``, ``records``,
``freeze`` and ``export --reference`` know its operators; a module that
cannot be imported is one line naming it, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from laytune.cli import main
from laytune.records import FrozenLayouts
from tests.ops.user_modules import (
    BMM_MODULE,
    DEFINED_MODULE,
    isolated_registry,  # noqa: F401  (a fixture)
)
from tests.records.test_export import entry

ROOT = Path(__file__).resolve().parents[1]
BMM_KEY = "bmm(batch=2,M=3,N=4,K=5;float32)"

pytestmark = pytest.mark.usefixtures("isolated_registry")


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``my_bmm.py`` in the current directory (a fresh one)."""
    (tmp_path / "my_bmm.py").write_text(BMM_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LAYTUNE_IMPORT", raising=False)
    return tmp_path / "my_bmm.py"


def _frozen_bmm(folder: Path) -> Path:
    """A frozen file holding one entry of the user's bmm (identity layouts)."""
    from laytune import ops

    return FrozenLayouts([entry(ops.from_key(BMM_KEY))]).save(folder / "bmm.json")


@pytest.mark.parametrize(
    ("argv", "environment", "message"),
    [
        (
            ["--import", "no_such_ops", "records"],
            "",
            "cannot import 'no_such_ops': ModuleNotFoundError: No module named 'no_such_ops'",
        ),
        (["records"], "my_bmm, no_such_ops", "cannot import 'no_such_ops': ModuleNotFoundError"),
        (["--import", "broken.py", "workloads"], "", "cannot import 'broken.py': SyntaxError: "),
        (["--import=raising", "freeze"], "", "cannot import 'raising': ZeroDivisionError: "),
        (
            ["--import", "absent.py", "tune", "--help"],
            "",
            "cannot import 'absent.py': no such file",
        ),
    ],
)
def test_a_module_that_cannot_be_imported_is_one_line_and_exit_2(
    argv: list[str],
    environment: str,
    message: str,
    user_module: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (user_module.parent / "broken.py").write_text("def bmm(:\n")
    (user_module.parent / "raising.py").write_text("import laytune\n1 / 0\n")
    monkeypatch.setenv("LAYTUNE_IMPORT", environment)
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"laytune: error: {message}")
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert list(user_module.parent.glob("*.db")) == []  # no command ran


def test_without_the_module_an_unknown_operator_says_how_to_name_it(
    user_module: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["tune", "bmm", "--shape", "batch=2,M=3,N=4,K=5", "--device", "no-such-gpu"]
    assert main(argv) == 2
    assert "laytune --import MODULE tune bmm" in capsys.readouterr().err
    # with it, tune takes the operator and goes on to the device (tune picks
    # the workloads first; the whole job is the slow test below)
    assert main(["--import", "my_bmm", *argv]) == 2
    assert "no OpenCL device matches 'no-such-gpu'" in capsys.readouterr().err


def test_tune_names_a_workload_the_module_defines_without_registering(
    user_module: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from laytune import cli

    (user_module.parent / "defined.py").write_text(DEFINED_MODULE)
    picked = []
    monkeypatch.setattr(cli, "_cmd_tune", lambda args: picked.extend(cli._workloads(args)) or 0)
    assert main(["--import", "defined", "tune", "scale_add"]) == 0
    assert [w.key.partition(")#")[0] for w in picked] == [
        "scale_add(X[4, 8],Z[4, 8],Y[4, 8];float32"
    ]
    assert main(["--import", "defined", "tune", picked[0].key]) == 0
    assert picked[1] is picked[0]
    # two workloads of one name: the key says which
    (user_module.parent / "two.py").write_text(
        DEFINED_MODULE
        + 'WIDE = Workload.define("scale_add", "Y[i, j] = X[i, j] * 2.0 + Z[i, j]", '
        + '{"i": 4, "j": 16}, {"X": (4, 16), "Z": (4, 16)})\n'
    )
    assert main(["--import", "two", "tune", "scale_add"]) == 2
    err = capsys.readouterr().err
    assert "name one of its workloads by key: scale_add(X[4, 16]" in err


@pytest.mark.parametrize("how", ["--import", "--import path", "LAYTUNE_IMPORT"])
def test_tune_help_lists_the_operators_the_module_registers(
    how: str, user_module: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if how == "LAYTUNE_IMPORT":
        monkeypatch.setenv("LAYTUNE_IMPORT", "my_bmm")
        argv = ["tune", "--help"]
    else:
        module = "my_bmm" if how == "--import" else str(user_module)
        argv = ["--import", module, "tune", "--help"]
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "bmm batch=INT M=INT N=INT K=INT: C[b, i, j] += A[b, i, k] * B[b, k, j]" in out
    assert "laytune tune bmm --shape batch=2,M=8,N=8,K=8" in out


def test_export_reference_of_a_user_operator_needs_its_module(
    user_module: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from laytune import ops

    ops.import_workloads("my_bmm")
    frozen = _frozen_bmm(user_module.parent)
    capsys.readouterr()
    assert main(["--import", "my_bmm", "export", str(frozen), "--out", "out", "--reference"]) == 0
    manifest = json.loads(Path("out/manifest.json").read_text())
    files = manifest["workloads"][BMM_KEY][0]["files"]
    a, b = (
        np.fromfile(Path("out") / files["inputs"][name], dtype="<f4").reshape(shape)
        for name, shape in (("A", (2, 3, 5)), ("B", (2, 5, 4)))
    )
    c = np.fromfile(Path("out") / files["reference"]["C"], dtype="<f4").reshape(2, 3, 4)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_a_user_operator_is_tuned_frozen_and_exported_from_the_command_line(
    tmp_path: Path,
) -> None:
    """The README's steps, each a fresh ``laytune`` process, on the user's bmm."""
    (tmp_path / "my_bmm.py").write_text(BMM_MODULE)
    env = {k: v for k, v in os.environ.items() if k not in ("LAYTUNE_DB", "LAYTUNE_IMPORT")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    db = ["--db", f"sqlite:///{tmp_path / 'bmm.db'}"]
    laytune = [str(Path(sys.executable).parent / "laytune")]

    def run(*argv: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*laytune, *argv],
            cwd=tmp_path,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=300,
        )

    shape = ["--shape", "batch=2,M=8,N=8,K=8"]
    tuned = run("--import", "my_bmm", "tune", "bmm", *shape, "--trials", "2", "--quiet", *db)
    assert tuned.returncode == 0, tuned.stdout + tuned.stderr
    assert "bmm(batch=2,M=8,N=8,K=8;float32)" in tuned.stdout
    listed = run("records", "--best", *db, LAYTUNE_IMPORT="my_bmm")
    assert listed.returncode == 0 and "bmm" in listed.stdout, listed.stderr
    frozen = run("--import", "my_bmm", "freeze", *db, "--out", "bmm.json")
    assert frozen.returncode == 0 and "froze 1 workload(s)" in frozen.stdout, frozen.stderr

    refused = run("export", "bmm.json", "--out", "out", "--reference")
    assert refused.returncode == 2 and "laytune --import MODULE" in refused.stderr
    exported = run("--import", "my_bmm.py", "export", "bmm.json", "--out", "out", "--reference")
    assert exported.returncode == 0, exported.stdout + exported.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    (item,) = manifest["workloads"]["bmm(batch=2,M=8,N=8,K=8;float32)"]
    files = item["files"]
    a, b = (
        np.fromfile(tmp_path / "out" / files["inputs"][name], dtype="<f4").reshape(2, 8, 8)
        for name in "AB"
    )
    c = np.fromfile(tmp_path / "out" / files["reference"]["C"], dtype="<f4").reshape(2, 8, 8)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
