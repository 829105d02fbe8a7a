"""`gitops init [DIR]`: a scaffold that validates, never overwriting a user's file."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitops.cli import main
from gitops.commands.init import SCAFFOLD, next_steps
from gitops.specs.loading import Loader


def test_init_writes_the_spec_and_its_app(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", str(tmp_path)]) == 0
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == sorted(SCAFFOLD)
    assert "created" in capsys.readouterr().out


def test_the_scaffold_validates(tmp_path: Path) -> None:
    main(["init", str(tmp_path)])
    result = Loader().load_directory(tmp_path / "deployments", tmp_path)
    assert result.ok, result.errors
    assert result.state is not None and set(result.state.endpoints) == {"hello"}


def test_init_refuses_to_overwrite_and_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mine = tmp_path / "deployments" / "hello.py"
    mine.parent.mkdir()
    mine.write_text("# mine\n")
    assert main(["init", str(tmp_path)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"gitops init: {mine} already exists; nothing was written (move it away or pick another DIR)"
    )
    assert mine.read_text() == "# mine\n" and not (tmp_path / "deployments" / "hello.toml").exists()


def test_next_steps_are_three_commands_in_a_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    commands = next_steps(tmp_path).splitlines()[1:]
    assert [line.split()[0:2] for line in commands] == [["gitops", "validate"], ["git", "add"], ["gitops", "run"]]


def test_next_steps_outside_a_repository_start_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path.parent)
    steps = next_steps(tmp_path)
    assert steps.splitlines()[1] == f"cd {tmp_path}" and "git init && git add deployments" in steps


def test_row13_a_dangling_link_is_refused_and_nothing_is_written_outside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target, outside = tmp_path / "target", tmp_path / "outside"
    (target / "deployments").mkdir(parents=True)
    outside.mkdir()
    link = target / "deployments" / "hello.py"
    link.symlink_to(outside / "planted.py")  # dangling: .exists() is False
    assert main(["init", str(target)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"gitops init: {link} is a symbolic link; nothing was written"), err
    assert list(outside.iterdir()) == [] and not (target / "deployments" / "hello.toml").exists()


def test_row13_a_linked_directory_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target, outside = tmp_path / "target", tmp_path / "outside"
    target.mkdir()
    outside.mkdir()
    (target / "deployments").symlink_to(outside)
    assert main(["init", str(target)]) == 1
    assert f"{target / 'deployments'} is a symbolic link" in capsys.readouterr().err
    assert list(outside.iterdir()) == []


def test_row13_a_link_made_after_the_check_is_not_followed(tmp_path: Path) -> None:
    from gitops.commands.init import _create
    from gitops.errors import UserError

    target, outside = tmp_path / "target", tmp_path / "outside"
    (target / "deployments").mkdir(parents=True)
    outside.mkdir()
    (target / "deployments" / "hello.py").symlink_to(outside / "planted.py")
    with pytest.raises(UserError, match="hello.py"):
        _create(target, "deployments/hello.py", "x = 1\n")
    assert list(outside.iterdir()) == []
