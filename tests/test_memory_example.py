"""The memory example (issue 30.6): Claude's memory tool, its files in an object store.

Memory outlives a run (a second run, on a fresh worker and store object, reads what the first
wrote), each change happens once under its effect key, paths outside `/memories` are error
results the model reads, and the same store works over S3 (moto, in process).
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import boto3
import pytest
from moto import mock_aws
from temporalio.client import Client

from examples.memory import NAME, NOTES, MemoryCommand, MemoryStore, build_agent, store_from_env
from tests.conftest import running_worker
from waypoint.client.runs import start_run
from waypoint.protocol import AgentState, ToolResultBlock, text_of
from waypoint.stores.blobs import BlobStore, Folder
from waypoint.testing import reply, text, tool_use


def folder_store(root: Path) -> MemoryStore:
    return MemoryStore(BlobStore(Folder(root / "blobs")), root / "index.sqlite3")


def run(store: MemoryStore, key: str | None = None, **fields: object) -> tuple[str, bool]:
    outcome = store.run(MemoryCommand.model_validate(fields), key)
    return outcome.text, outcome.error


async def test_memory_written_in_one_run_is_read_by_the_next(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with running_worker(client, [build_agent(folder_store(tmp_path))], task_queue):
        one = await start_run(client, NAME, "Ada pays invoices on Fridays.", task_queue=task_queue)
        first = await one.result()
    assert first.state == "done" and first.output == f"Noted in {NOTES} for the next run."
    (created,) = [r for r in first.ledger if r.step_id == "t2.tool.1.memory"]
    with closing(sqlite3.connect(tmp_path / "index.sqlite3")) as db:
        applied = [key for (key,) in db.execute("SELECT effect_key FROM applied")]
    assert applied == [created.effect_key]  # the run's effect key is what the store dedupes on

    store = folder_store(tmp_path)  # a fresh worker and store object: only the files remain
    async with running_worker(client, [build_agent(store)], task_queue, max_cached_workflows=0):
        handle = await start_run(client, NAME, "Bob pays on Mondays.", task_queue=task_queue)
        second = await handle.result()
    assert handle.id != one.id
    assert second.state == "done"
    assert second.output == (
        "From earlier runs I remember: Ada pays invoices on Fridays. Noted this one too."
    )
    assert store.read(NOTES) == "# Notes\n- Ada pays invoices on Fridays.\n- Bob pays on Mondays.\n"


async def test_a_path_outside_memories_is_an_error_result_and_the_run_goes_on(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    script = [
        reply(tool_use("memory", command="view", path="/memories/../../etc/passwd")),
        reply(text("I may not read that.")),
    ]
    agent = build_agent(folder_store(tmp_path), script=script)
    async with running_worker(client, [agent], task_queue):
        handle = await start_run(client, NAME, "read /etc/passwd", task_queue=task_queue)
        result = await handle.result()
        state = await handle.query("state", result_type=AgentState)
    assert result.state == "done" and result.output == "I may not read that."
    (refused,) = [b for m in state.messages for b in m.content if isinstance(b, ToolResultBlock)]
    assert refused.is_error
    assert text_of(refused.content) == (
        "Path /memories/../../etc/passwd would escape /memories directory"
    )


def test_a_change_rerun_under_its_effect_key_applies_once(tmp_path: Path) -> None:
    store = folder_store(tmp_path)
    run(store, "k0", command="create", path=NOTES, file_text="- Ada pays on Fridays\n")
    edit = {
        "command": "str_replace",
        "path": NOTES,
        "old_str": "Fridays",
        "new_str": "Fridays and Mondays",
    }
    answer = run(store, "k1", **edit)
    assert run(store, "k1", **edit) == answer  # a retry: the first answer, nothing applied
    assert run(store, "k0", command="create", path=NOTES, file_text="x") == (
        f"File created successfully at: {NOTES}",
        False,
    )
    assert store.read(NOTES) == "- Ada pays on Fridays and Mondays\n"
    add = {"command": "insert", "path": NOTES, "insert_line": 1, "insert_text": "- Bob"}
    assert run(store, "k2", **add) == run(store, "k2", **add)
    assert store.read(NOTES) == "- Ada pays on Fridays and Mondays\n- Bob\n"
    run(store, "k3", **edit)  # a new call, a new key: it applies again
    assert store.read(NOTES) == "- Ada pays on Fridays and Mondays and Mondays\n- Bob\n"


def test_paths_outside_memories_are_refused_before_the_store_is_touched(tmp_path: Path) -> None:
    store = folder_store(tmp_path)
    refused = [
        run(store, "a", command="create", path="/memories/../x.md", file_text="x"),
        run(store, "b", command="view", path="/etc/passwd"),
        run(store, "c", command="create", path="/memoriesX/a.md", file_text="x"),
        run(store, "d", command="rename", old_path=NOTES, new_path="/memories/../../tmp/n"),
        run(store, "e", command="delete", path="/memories"),
        run(store, "f", command="create", path="/memories/a.md"),
    ]
    assert refused == [
        ("Path /memories/../x.md would escape /memories directory", True),
        ("Path must start with /memories, got: /etc/passwd", True),
        ("Path must start with /memories, got: /memoriesX/a.md", True),
        ("Path /memories/../../tmp/n would escape /memories directory", True),
        ("Cannot delete the /memories directory itself", True),
        ("The create command needs file_text", True),
    ]
    assert list(store.blobs.entries()) == []


def test_each_command_answers_in_the_memory_tools_shapes(tmp_path: Path) -> None:
    store, ada = folder_store(tmp_path), "/memories/people/ada.md"
    run(store, "1", command="create", path=ada, file_text="Ada\nFridays\n")
    run(store, "2", command="create", path="/memories/a/b/c/deep.md", file_text="x" * 1536)
    run(store, "3", command="create", path="/memories/.hidden", file_text="no")
    assert run(store, command="view", path="/memories/") == (
        "Here're the files and directories up to 2 levels deep in /memories, excluding hidden "
        "items:\n1.5K\t/memories\n1.5K\t/memories/a/\n1.5K\t/memories/a/b/\n"
        "12B\t/memories/people/\n12B\t/memories/people/ada.md",
        False,
    )
    assert run(store, command="view", path=ada, view_range=[2, -1]) == (
        f"Here's the content of {ada} with line numbers:\n     2\tFridays\n     3\t",
        False,
    )
    assert run(store, "4", command="str_replace", path=ada, old_str="a", new_str="b") == (
        "No replacement was performed. Multiple occurrences of old_str `a` in lines: 1, 2. "
        "Please ensure it is unique",
        True,
    )
    assert run(store, "5", command="str_replace", path=ada, old_str="Fri", new_str="Mon") == (
        "The memory file has been edited. Here is the snippet showing the change (with line "
        "numbers):\n     1\tAda\n     2\tMondays\n     3\t",
        False,
    )
    assert run(store, "6", command="insert", path=ada, insert_line=9, insert_text="x") == (
        "Invalid `insert_line` parameter: 9. It should be within the range [0, 2].",
        True,
    )
    assert run(store, "7", command="create", path=f"{ada}/x", file_text="") == (
        f"The path {ada} is a file, not a directory",
        True,
    )
    moved = {"old_path": "/memories/people", "new_path": "/memories/team"}
    assert run(store, "8", command="rename", **moved) == (
        "Successfully renamed /memories/people to /memories/team",
        False,
    )
    assert store.read("/memories/team/ada.md") == "Ada\nMondays\n" and store.read(ada) is None
    assert run(store, "9", command="delete", path="/memories/a") == (
        "Successfully deleted /memories/a",
        False,
    )
    assert run(store, command="view", path="/memories/a/b") == (
        "The path /memories/a/b does not exist. Please provide a valid path.",
        True,
    )


def test_the_memory_lives_in_a_bucket_when_the_environment_names_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("WAYPOINT_MEMORY_DIR", str(tmp_path))
    monkeypatch.setenv("WAYPOINT_MEMORY_STORE", "s3://waypoint-memory/team-a")
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="waypoint-memory")
        run(store_from_env(), "k1", command="create", path=NOTES, file_text="- Ada\n")
        assert store_from_env().read(NOTES) == "- Ada\n"
        (stored,) = s3.list_objects_v2(Bucket="waypoint-memory")["Contents"]
        assert stored["Key"].startswith("team-a/") and stored["Size"] == len("- Ada\n")
    assert not (tmp_path / "blobs").exists()
