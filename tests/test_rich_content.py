"""Rich content: tools return images and documents, a task carries attachments, big ones go to
the payload store, and a result that cannot be serialised fails its step clearly."""

from __future__ import annotations

import asyncio
import base64
import datetime
import os
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import running_worker
from tests.support.clients import default_store_client
from tests.test_cli import ROOT, waypoint
from waypoint import ContentError, attachment, document, image
from waypoint._agent import Agent
from waypoint._content import DOCUMENT_MAX_BASE64, IMAGE_MAX_BASE64, check, image_size
from waypoint._tools import render_result, tool
from waypoint.client.runs import start_run, state
from waypoint.protocol import (
    DocumentBlock,
    ImageBlock,
    ModelRequest,
    ModelResponse,
    RunResult,
    TextBlock,
    ToolResultBlock,
)
from waypoint.stores.payloads import ContentAddressedFileDriver
from waypoint.testing import last_tool_results, reply, text, tool_use

PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(width: int, height: int, noise: bool = False) -> bytes:
    """A valid RGB PNG; with `noise` its pixels are random, so it stays ~3 bytes a pixel."""
    row = (lambda: os.urandom(width * 3)) if noise else (lambda: bytes(width * 3))
    raw = b"".join(b"\x00" + row() for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(raw, 0 if noise else 9))
        + _chunk(b"IEND", b"")
    )


def jpeg_header(width: int, height: int) -> bytes:
    """The start of a baseline JPEG: SOI, an APP0 segment, then the frame header with the size."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + bytes(9)
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 3) + bytes(9)
    return b"\xff\xd8" + app0 + sof0


GIF = b"GIF89a" + struct.pack("<HH", 4, 3) + bytes(20)
WEBP = b"RIFF" + struct.pack("<I", 30) + b"WEBPVP8X" + bytes(8) + (9).to_bytes(3, "little") * 2


# --- The helpers ------------------------------------------------------------------------------


def test_helpers_read_the_type_from_the_bytes_not_the_name(tmp_path: Path) -> None:
    misnamed = tmp_path / "photo.pdf"
    misnamed.write_bytes(png(3, 2))
    assert image(misnamed).media_type == "image/png"
    assert image(jpeg_header(640, 480)).media_type == "image/jpeg"
    assert image(GIF).media_type == "image/gif"
    assert image(WEBP).media_type == "image/webp"
    assert image_size(png(3, 2)) == (3, 2)
    assert image_size(jpeg_header(640, 480)) == (640, 480)
    assert image_size(GIF) == (4, 3)
    assert image_size(WEBP) == (10, 10)
    assert base64.b64decode(image(misnamed).data) == png(3, 2)

    report = tmp_path / "report.pdf"
    report.write_bytes(PDF)
    pdf = document(report)
    assert (pdf.media_type, pdf.title) == ("application/pdf", "report.pdf")
    assert document(b"plain words", title="notes").media_type == "text/plain"
    assert isinstance(attachment(report), DocumentBlock)
    assert isinstance(attachment(misnamed), ImageBlock)

    with pytest.raises(ContentError, match="is image/png, not image/jpeg"):
        image(misnamed, media_type="image/jpeg")
    with pytest.raises(ContentError, match="is not a PNG, JPEG, GIF or WEBP image"):
        image(PDF)
    with pytest.raises(ContentError, match="neither a PDF nor UTF-8 text"):
        document(b"\x00\x01\x02")


def test_helpers_refuse_what_the_api_would_refuse(tmp_path: Path) -> None:
    too_big = b"\x89PNG\r\n\x1a\n" + bytes(IMAGE_MAX_BASE64 * 3 // 4)
    with pytest.raises(
        ContentError, match=r"5\.0 MiB base64-encoded; .* at most 5 MiB for an image"
    ):
        image(too_big)
    assert image(too_big[: IMAGE_MAX_BASE64 * 3 // 4 - 8])  # just under the limit
    with pytest.raises(ContentError, match="9000x20 px; the API accepts at most 8000x8000"):
        image(jpeg_header(9000, 20))
    with pytest.raises(ContentError, match="at most 32 MiB for a document"):
        document(PDF + bytes(DOCUMENT_MAX_BASE64 * 3 // 4))
    with pytest.raises(ContentError, match="nowhere.png: no such file"):
        attachment(tmp_path / "nowhere.png")
    with pytest.raises(ContentError, match="is a directory"):
        attachment(tmp_path)
    with pytest.raises(ContentError, match="unknown file type"):
        attachment(b"\x00\x01binary")
    forged = ImageBlock(media_type="image/png", data=base64.b64encode(PDF).decode())
    with pytest.raises(ContentError, match="its bytes are not image/png"):
        check(forged)
    with pytest.raises(ContentError, match="not valid base64"):
        check(ImageBlock(media_type="image/png", data="%%%"))


class Point(BaseModel):
    x: int


def test_render_result_keeps_blocks_and_refuses_what_it_cannot_serialise() -> None:
    pic = image(png(2, 2))
    assert render_result("plain") == "plain"
    assert render_result(pic) == [pic]
    assert render_result(["a chart", pic, ""]) == [TextBlock(text="a chart"), pic]
    assert render_result(("a", pic)) == [TextBlock(text="a"), pic]
    assert render_result(["a", "b"]) == '["a", "b"]'  # no blocks: JSON as before
    assert render_result(Point(x=1)) == '{"x":1}'
    assert render_result({"n": 1}) == '{"n": 1}'
    with pytest.raises(TypeError, match=r"type 'dict' .*type date is not JSON serializable"):
        render_result({"when": datetime.date(2026, 1, 2)})
    with pytest.raises(TypeError, match="type 'object'"):
        render_result(object())
    with pytest.raises(TypeError, match="item 1 is of type 'int'"):
        render_result([pic, 3])


# --- On the dev server ------------------------------------------------------------------------


async def finished(handle: WorkflowHandle[Any, Any]) -> Any:
    """The run's result; fails instead of hanging if a workflow task keeps failing."""
    return await asyncio.wait_for(handle.result(), timeout=60)


class ChartArgs(BaseModel):
    size: int = 2


def seen_results(seen: list[list[ToolResultBlock]], answer: str = "seen"):
    def entry(request: ModelRequest) -> ModelResponse:
        seen.append(last_tool_results(request))
        return reply(text(answer))

    return entry


UNCACHED = {"max_cached_workflows": 0}
"""A worker that replays every task from history."""


async def one_tool_turn(
    client: Client,
    task_queue: str,
    tools: list[Any],
    calls: ModelResponse,
    answer: str,
    worker: dict[str, Any] | None = None,
) -> tuple[WorkflowHandle[Any, RunResult], RunResult, list[list[ToolResultBlock]]]:
    """A run whose model makes `calls`, then says `answer`: its result and what the model saw."""
    seen: list[list[ToolResultBlock]] = []
    script = [calls, seen_results(seen, answer)]
    agent = Agent(name="tools", model="claude-sonnet-4-6", system="s", tools=tools, script=script)
    async with running_worker(client, [agent], task_queue, **(worker or {})):
        handle = await start_run(client, "tools", "go", task_queue=task_queue)
        return handle, await finished(handle), seen


async def test_tool_returning_text_and_image_reaches_the_model(
    client: Client, task_queue: str
) -> None:
    picture = png(4, 4)

    @tool("read")
    async def chart(args: ChartArgs) -> list:
        """Draw a chart."""
        return ["sales by month", image(picture), document(PDF, title="data")]

    calls = reply(tool_use("chart"))
    _, result, seen = await one_tool_turn(client, task_queue, [chart], calls, "seen", UNCACHED)
    assert result.output == "seen"
    (only,) = seen[0]
    assert not only.is_error and isinstance(only.content, list)
    words, pic, doc = only.content
    assert words == TextBlock(text="sales by month")
    assert isinstance(pic, ImageBlock) and base64.b64decode(pic.data) == picture
    assert isinstance(doc, DocumentBlock) and doc.title == "data"
    step = next(r for r in result.ledger if r.step_id == "t1.tool.1.chart")
    assert step.status == "completed"
    assert step.summary == "sales by month [image image/png] [document application/pdf]"


class NoArgs(BaseModel):
    pass


async def test_result_that_cannot_be_sent_fails_its_step_once_naming_tool_and_type(
    client: Client, task_queue: str
) -> None:
    runs_of: dict[str, int] = {"stamp": 0, "snapshot": 0}

    @tool("read")
    async def stamp(args: NoArgs) -> dict:
        """Tell the time."""
        runs_of["stamp"] += 1
        return {"at": datetime.datetime(2026, 1, 2, 3, 4)}

    @tool("read")
    async def snapshot(args: NoArgs) -> ImageBlock:
        """Take a picture (a broken one)."""
        runs_of["snapshot"] += 1
        return image(b"not a picture")

    calls = reply(tool_use("stamp"), tool_use("snapshot"))
    _, result, seen = await one_tool_turn(client, task_queue, [stamp, snapshot], calls, "gave up")
    assert result.output == "gave up"
    assert runs_of == {"stamp": 1, "snapshot": 1}  # non-retryable: each ran once
    stamped, snapped = seen[0]
    assert stamped.is_error and snapped.is_error
    assert isinstance(stamped.content, str) and isinstance(snapped.content, str)
    assert "tool 'stamp' ran, but its result cannot be sent to the model" in stamped.content
    assert "type 'dict'" in stamped.content and "type datetime" in stamped.content
    assert "ContentError" in snapped.content and "is not a PNG" in snapped.content
    assert "datetime.datetime(" not in stamped.content  # never str()'d


async def test_one_mib_image_goes_to_the_payload_store_and_history_stays_small(
    env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    client = await default_store_client(env, store)
    picture = png(600, 600, noise=True)  # about 1 MiB raw, 1.4 MiB base64
    assert len(picture) > 1024 * 1024

    @tool("read")
    async def photo(args: NoArgs) -> ImageBlock:
        """Take a photo."""
        return image(picture)

    calls = reply(tool_use("photo"))
    turn = await one_tool_turn(client, task_queue, [photo], calls, "nice photo", UNCACHED)
    handle, result, seen = turn
    assert result.output == "nice photo"
    (pic,) = seen[0][0].content
    assert isinstance(pic, ImageBlock) and base64.b64decode(pic.data) == picture
    largest = total = 0
    async for event in handle.fetch_history_events():
        largest = max(largest, event.ByteSize())
        total += event.ByteSize()
    assert largest < 16 * 1024 and total < 64 * 1024
    assert ContentAddressedFileDriver(store).stored_bytes() > len(pic.data)
    # The scripted model estimates an image by its size, capped as the API caps it.
    model_steps = {r.step_id: r.tokens for r in result.ledger if r.kind == "model"}
    assert model_steps["t2.model"] < 2_000


async def test_attachments_are_carried_by_the_run_and_sent_in_the_first_message(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    photo, report = image(png(3, 3)), document(PDF, title="invoice.pdf")
    agent = build_agent(Payments(tmp_path / "p.db"), PAY_SCRIPT)
    async with running_worker(client, [agent], task_queue) as model:
        handle = await start_run(
            client, "payer", "pay ada 5", task_queue=task_queue, attachments=[photo, report]
        )
        await finished(handle)
        kept = await state(client, handle.id)
    assert kept.input.attachments == [photo, report]
    # Needs the workflow to put the attachments in the first user message (the integrator's
    # one-line change in waypoint/_workflows/agent.py).
    first = model.requests[0].messages[0]
    assert first.role == "user"
    assert photo in first.content and report in first.content
    assert TextBlock(text="pay ada 5") in first.content


async def test_start_run_refuses_a_forged_attachment_before_starting(
    client: Client, task_queue: str
) -> None:
    forged = ImageBlock(media_type="image/gif", data=base64.b64encode(png(2, 2)).decode())
    with pytest.raises(ContentError, match="attachment 1: its bytes are not image/gif"):
        await start_run(client, "payer", "go", task_queue=task_queue, attachments=[forged])


# --- The CLI ----------------------------------------------------------------------------------


@pytest.fixture
def cli_env(env: WorkflowEnvironment, task_queue: str) -> dict[str, str]:
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": "default",
        "WAYPOINT_TASK_QUEUE": task_queue,
        "PYTHONPATH": str(ROOT),
    }


def _one_line_error(proc: subprocess.CompletedProcess[str], expected: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], proc.stderr
    assert lines[0].startswith("error: --attach ")
    assert "started" not in proc.stdout


def test_cli_attach_refuses_missing_unknown_and_too_big_files(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    _one_line_error(
        waypoint(cli_env, "start", "payer", "go", "--attach", str(tmp_path / "gone.png")),
        "gone.png: no such file",
    )
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"\x00\x01\x02\x03")
    _one_line_error(
        waypoint(cli_env, "start", "payer", "go", "--attach", str(blob)), "unknown file type"
    )
    huge = tmp_path / "huge.png"
    huge.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(4 * 1024 * 1024))
    _one_line_error(
        waypoint(cli_env, "start", "payer", "go", "--attach", str(huge)),
        "at most 5 MiB for an image",
    )


async def test_cli_attach_sends_images_and_pdfs_with_the_task(
    cli_env: dict[str, str], client: Client, task_queue: str, tmp_path: Path
) -> None:
    (tmp_path / "chart.png").write_bytes(png(5, 5))
    (tmp_path / "invoice.pdf").write_bytes(PDF)
    agent = build_agent(Payments(tmp_path / "p.db"), PAY_SCRIPT)
    async with running_worker(client, [agent], task_queue):
        started = await asyncio.to_thread(
            waypoint,
            cli_env,
            "start",
            "payer",
            "pay ada 5",
            "--attach",
            str(tmp_path / "chart.png"),
            "--attach",
            str(tmp_path / "invoice.pdf"),
        )
        assert started.returncode == 0, started.stderr
        run = started.stdout.split()[1]
        await finished(client.get_workflow_handle(run))
        kept = await state(client, run)
    assert kept.input.attachments == [image(png(5, 5)), document(tmp_path / "invoice.pdf")]
