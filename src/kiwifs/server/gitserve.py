"""One ``git http-backend`` per request, without blocking the server: the request's body
streamed to its standard input, its answer read back and streamed out.

The rules (which requests, which repository, which environment, how the answer's headers
read) are :mod:`kiwifs.git.smarthttp`'s; the HTTP side is ``rest/routes/gitserve.py``. This
module owns the process: it is started with anyio (the server's event loop keeps serving),
bounded in time (:data:`IDLE`: no byte either way for that long and it is killed) and in the
size of what it is sent (:data:`~kiwifs.git.smarthttp.MAX_BODY`, 413), and always killed and
reaped when the answer ends, however it ends (a client gone mid-clone included).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from subprocess import PIPE
from typing import IO

import anyio
from anyio.abc import Process

from kiwifs.errors import PayloadTooLarge, StorageError, UsageError
from kiwifs.git import smarthttp
from kiwifs.git.smarthttp import MAX_BODY, MAX_HEAD, CgiRequest

log = logging.getLogger("kiwifs.gitserve")
IDLE = 60.0  # seconds without a byte from the client or from git before the request is given up
GRACE = 5.0  # seconds git may take to exit once its answer is read, before it is killed
CHUNK = 64 * 1024
_STDERR_KEPT = 4096


@dataclass
class Answer:
    """What git answered: the status and headers of its CGI header block, and its body, which
    must be iterated to its end or closed (:meth:`close`): the process lives until then."""

    status: int
    headers: list[tuple[str, str]]
    process: Process
    first: bytes  # the body's bytes read together with the headers
    errors: IO[bytes]  # git's standard error (a file: a pipe would need a reader of its own)

    async def body(self) -> AsyncIterator[bytes]:
        """The body as git writes it; the process is reaped when it ends or is abandoned."""
        ended = False
        try:
            if self.first:
                yield self.first
            stdout = self.process.stdout
            assert stdout is not None
            while True:
                try:
                    with anyio.fail_after(IDLE):
                        chunk = await stdout.receive(CHUNK)
                except (anyio.EndOfStream, anyio.ClosedResourceError):
                    ended = True
                    break
                except TimeoutError:
                    log.warning("git http-backend gave nothing for %.0f s: killed", IDLE)
                    break
                yield chunk
        finally:
            await self.close(GRACE if ended else 0.0)

    async def close(self, grace: float = 0.0) -> None:
        """Reap the process, killed unless it exits within ``grace`` seconds (shielded: this
        runs on the way out of a cancelled request too). Git's complaints are logged."""
        said = _said(self.errors)
        await _end(self.process, self.errors, grace)
        if self.process.returncode:
            log.info("git http-backend exited %s: %s", self.process.returncode, said)


async def answer(
    root: Path,
    method: str,
    path: str,
    query: str,
    headers: Mapping[str, str],
    remote_addr: str | None,
    body: AsyncIterable[bytes],
) -> Answer:
    """Serve ``method`` on ``path`` (relative to the repository's URL: ``info/refs``,
    ``git-upload-pack``) with the raw ``query`` and the request's ``headers`` (lower-case
    names) from ``root``'s repository: what :func:`kiwifs.git.smarthttp.cgi_request` allows
    (403 for a push or the dumb protocol, 404 for anything else), run by :func:`serve`."""
    request = smarthttp.with_headers(
        smarthttp.cgi_request(method, path, query),
        headers.get("content-type"),
        headers.get("content-length"),
        headers.get("content-encoding"),
        remote_addr,
    )
    return await serve(root, request, body)


async def serve(root: Path, request: CgiRequest, body: AsyncIterable[bytes]) -> Answer:
    """Run ``git http-backend`` for ``request`` on ``root``'s repository, feeding it ``body``.

    Returns once git has written its headers and the whole body has been handed to it (a body
    over :data:`~kiwifs.git.smarthttp.MAX_BODY` is 413, one that stalls for :data:`IDLE`
    seconds 400, both before any answer is sent). :class:`~kiwifs.errors.NotFound` for a root
    that is not versioned; :class:`StorageError` (503) when git cannot be run or answers
    nothing a CGI program would."""
    git_dir = smarthttp.repository(root)
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise PayloadTooLarge(_too_large())
    errors = tempfile.TemporaryFile()  # noqa: SIM115 (closed with the process, by _end)
    try:
        process = await anyio.open_process(
            list(smarthttp.COMMAND),
            stdin=PIPE,
            stdout=PIPE,
            stderr=errors,
            cwd=git_dir,
            env=smarthttp.environment(git_dir, request),
        )
    except OSError as exc:
        errors.close()
        raise StorageError(f"cannot run git http-backend: {exc}") from exc
    fault: list[Exception] = []
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_feed, process, body, fault)
            try:
                head = await _read_head(process)
            except StorageError as exc:  # raised here, it would come out as an ExceptionGroup
                fault.append(exc)
                head = None
                process.kill()
                group.cancel_scope.cancel()
            # leaving the group waits for the body's end: a 413 or 400 must still be possible
            # (git http-backend reads the whole body before upload-pack answers, so nothing
            # waits on the answer meanwhile)
    except BaseException:
        await _end(process, errors)
        raise
    if fault or head is None:
        said = _said(errors)
        await _end(process, errors)
        if fault:  # the first: a body's fault comes before git's end that it caused
            raise fault[0]
        raise StorageError(f"git http-backend failed: {said or 'no answer'}")
    status, headers, first = head
    return Answer(status, headers, process, first, errors)


async def _feed(process: Process, body: AsyncIterable[bytes], fault: list[Exception]) -> None:
    """Hand ``body`` to git's standard input, then close it. Git stopping to read (it answered
    already, an error of its own) ends the feeding quietly; a body too large or stalled is
    recorded in ``fault`` and git is killed, so the head's reading ends too."""
    stdin = process.stdin
    assert stdin is not None
    size = 0
    chunks = aiter(body)
    try:
        while True:
            try:
                with anyio.fail_after(IDLE):
                    chunk = await anext(chunks)
            except StopAsyncIteration:
                break
            except TimeoutError:
                fault.append(UsageError(f"the request body stalled for {IDLE:.0f} s"))
                process.kill()
                return
            except Exception as exc:  # the client went away mid-body: re-raised by serve
                fault.append(exc)
                process.kill()
                return
            size += len(chunk)
            if size > MAX_BODY:
                fault.append(PayloadTooLarge(_too_large()))
                process.kill()
                return
            if chunk:
                with anyio.fail_after(IDLE):
                    await stdin.send(chunk)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, BrokenPipeError):
        pass  # git stopped reading: what it answers says why
    except TimeoutError:
        process.kill()  # git stopped reading without stopping: given up
    finally:
        try:
            await stdin.aclose()
        except (anyio.BrokenResourceError, OSError):
            pass


async def _read_head(process: Process) -> tuple[int, list[tuple[str, str]], bytes] | None:
    """Git's CGI header block, parsed, and whatever of the body came with it; ``None`` when
    git ended without one (it failed, or was killed for a body too large or stalled)."""
    stdout = process.stdout
    assert stdout is not None
    data = b""
    while (end := smarthttp.head_end(data)) is None:
        if len(data) > MAX_HEAD:
            raise StorageError("git http-backend answered no header block")
        try:
            with anyio.fail_after(IDLE):
                data += await stdout.receive(CHUNK)
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return None
        except TimeoutError as exc:
            raise StorageError(f"git http-backend answered nothing for {IDLE:.0f} s") from exc
    status, headers = smarthttp.parse_head(data[: end[0]])
    return status, headers, data[end[1] :]


async def _end(process: Process, errors: IO[bytes], grace: float = 0.0) -> None:
    """Reap ``process``, killed unless it exits within ``grace`` seconds (its output read to
    the end, it is about to), shielded from cancellation; then close its standard error's
    file."""
    with anyio.CancelScope(shield=True):
        if grace and process.returncode is None:
            with anyio.move_on_after(grace):
                await process.wait()
        if process.returncode is None:
            try:
                process.kill()
            except ProcessLookupError:
                pass
        await process.aclose()
    errors.close()


def _said(errors: IO[bytes]) -> str:
    """The last line of the first bytes git wrote on its standard error ("" once closed)."""
    if errors.closed:
        return ""
    errors.seek(0)
    lines = errors.read(_STDERR_KEPT).decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else ""


def _too_large() -> str:
    return f"the request body is over the {MAX_BODY >> 20} MiB limit"
