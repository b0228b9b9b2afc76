"""The ``git`` command run against another repository (a backup remote, a replica's primary),
one way for every caller: it starts no program that a repository or a user's configuration
names, and reaches only the transports the caller allows.

No hooks, credential helper, askpass, fsmonitor, pager, automatic gc or maintenance, submodule
recursion or commit-graph writes; no terminal prompt, and ssh in batch mode (never a password
prompt); ``protocol.allow=never`` with only the named transports let through (so ``ext::``, which
runs a command, never is). Extra environment variables (``GIT_CONFIG_*``) carry what must not show
in a process listing, such as a replica's key.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

_NO_PROGRAMS = (
    "--no-pager",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "credential.helper=",
    "-c",
    "core.askPass=",
    "-c",
    "gc.auto=0",
    "-c",
    "maintenance.auto=false",
    "-c",
    "fetch.recurseSubmodules=false",
    "-c",
    "fetch.writeCommitGraph=false",
)
_ENV_DROP = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
)


class GitFailed(Exception):
    """``git`` exited non-zero, or could not run or finish; the text says why (git's last
    error lines, or what happened to the process)."""


def options(transports: Iterable[str]) -> tuple[str, ...]:
    """The options every such command starts with, ``transports`` (``http``, ``ssh``, …) the
    only ones allowed."""
    allowed: list[str] = ["-c", "protocol.allow=never"]
    for name in transports:
        allowed += ["-c", f"protocol.{name}.allow=always"]
    return (*_NO_PROGRAMS, *allowed)


def environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without what would redirect git, prompts and askpass off."""
    env = {k: v for k, v in os.environ.items() if k not in _ENV_DROP}
    env |= {
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "",  # empty: no askpass program at all, not even core.askPass's
        "SSH_ASKPASS": "",
        "GIT_NO_LAZY_FETCH": "1",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    if "GIT_SSH_COMMAND" not in os.environ and "GIT_SSH" not in os.environ:
        env["GIT_SSH_COMMAND"] = "ssh -o BatchMode=yes"  # never a password prompt
    return env | dict(extra or {})


def run(
    args: Iterable[str],
    transports: Iterable[str],
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> str:
    """The output of ``git <options> args``; :class:`GitFailed` otherwise."""
    argv = ["git", *options(transports), *args]
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            env=environment(env),
            cwd=cwd,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise GitFailed(f"timed out after {timeout:.0f} s") from exc
    except OSError as exc:
        raise GitFailed(f"cannot run git: {exc.strerror or exc}") from exc
    if done.returncode != 0:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
        kept = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("hint:")]
        raise GitFailed("; ".join(kept[-3:]) or f"exit status {done.returncode}")
    return done.stdout.decode("utf-8", "replace")
