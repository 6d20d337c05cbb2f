"""Project hooks: MLflow run names, the git commit of a run."""

from __future__ import annotations

import subprocess
from pathlib import Path

from fedtopic_pipelines.hooks import git_commit, run_name


def test_run_name_says_pipeline_and_environment() -> None:
    assert run_name(None, "local") == "all@local"
    assert run_name(["__default__"], "s2orc") == "all@s2orc"
    assert run_name(["train"], "s2orc") == "train@s2orc"
    assert run_name(["train", "evaluate"], "smoke") == "train+evaluate@smoke"


def test_git_commit_and_dirty_flag_outside_and_inside_a_repository(tmp_path: Path) -> None:
    assert git_commit(tmp_path) == {}  # not a repository: nothing, no error

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=tmp_path,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    git("init", "-q")
    (tmp_path / "a.txt").write_text("one")
    git("add", "a.txt")
    git("commit", "-qm", "first")
    head = git("rev-parse", "HEAD")
    assert git_commit(tmp_path) == {"mlflow.source.git.commit": head, "git_dirty": "false"}
    (tmp_path / "a.txt").write_text("two")
    assert git_commit(tmp_path) == {"mlflow.source.git.commit": head, "git_dirty": "true"}
