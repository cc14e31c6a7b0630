"""convstore's MCP server driven by the official Python SDK (`mcp` on PyPI).

Run by tests/cli/test_mcp.rs as `python client.py CONVSTORE DB [URL]`:
starts `convstore --db DB mcp --allow-write` through the SDK's stdio
client (or, given URL, talks to the `/mcp` endpoint of a `convstore serve
--mcp-allow-write` over streamable HTTP), once with the 2025 handshake
(resources/subscribe) and once with the protocol the SDK negotiates on its
own (subscriptions/listen), and checks every tool and resource, and that a
write by another process is announced to subscribers. Prints `ok` at the
end; any failed check raises (exit 1).
"""

import asyncio
import json
import subprocess
import sys
import warnings

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters

CONVSTORE, DB = sys.argv[1], sys.argv[2]
SERVER = (
    sys.argv[3]
    if len(sys.argv) > 3
    else StdioServerParameters(command=CONVSTORE, args=["--db", DB, "mcp", "--allow-write"])
)

# A tool result long enough to be worth stripping, with a word found nowhere
# else (the search below looks for it).
RESULT = "\n".join(f"line {i}: quokkafrobnicate checksum {i * 7919}" for i in range(40))
EVENTS = [
    {"type": "turn_start"},
    {"type": "user", "text": "Read the log file, please."},
    {"type": "tool_call", "id": "c1", "name": "fs_read_file", "arguments": {"path": "app.log"}},
    {"type": "tool_result", "id": "c1", "content": RESULT, "is_error": False},
    {"type": "assistant", "text": "The log has 40 lines of checksums."},
    {"type": "turn_start"},
    {"type": "user", "text": "Thanks. Anything odd?"},
    {"type": "assistant", "text": "Nothing odd."},
]


def text_of(result: types.CallToolResult) -> str:
    assert len(result.content) == 1, result
    return result.content[0].text


async def tool(client: Client, name: str, **arguments) -> str:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, f"{name}: {text_of(result)}"
    return text_of(result)


async def tool_error(client: Client, name: str, **arguments) -> str:
    result = await client.call_tool(name, arguments)
    assert result.is_error, f"{name} should have failed: {text_of(result)}"
    return text_of(result)


def append_from_another_process(conversation: str, events: list) -> None:
    """`convstore append`, as a harness storing its model's turns would."""
    lines = "".join(json.dumps(e) + "\n" for e in events)
    done = subprocess.run(
        [CONVSTORE, "--db", DB, "--wait", "20", "append", conversation],
        input=lines.encode(),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()


async def tools_and_resources() -> None:
    updated: list[str] = []

    async def on_message(message) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.append(str(message.params.uri))

    async with Client(SERVER, mode="legacy", message_handler=on_message) as client:
        assert client.server_info.name == "convstore", client.server_info
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == {
            "list_conversations", "get_view", "recall", "search", "diff", "append", "compact",
        }, names

        appended = json.loads(await tool(client, "append", conversation="chat", events=EVENTS))
        assert len(appended["head"]) == 64, appended
        listed = json.loads(await tool(client, "list_conversations"))
        by_name = {c["name"]: c for c in listed}
        assert sorted(by_name) == ["chat", "seed"], listed
        chat = by_name["chat"]
        assert chat["records"] == len(EVENTS), chat

        # Resources: the log as appended, the view as projected.
        uris = {str(r.uri) for r in (await client.list_resources()).resources}
        assert {chat["view"], chat["log"]} < uris and len(uris) == 4, uris
        log = (await client.read_resource(chat["log"])).contents[0]
        assert log.mime_type == "application/x-ndjson", log
        records = [json.loads(line) for line in log.text.splitlines()]
        assert [r["type"] for r in records] == [e["type"] for e in EVENTS], records
        assert records[3]["content"] == RESULT
        view = (await client.read_resource("convstore://conversations/chat/view")).contents[0]
        assert json.loads(view.text.splitlines()[3])["content"] == RESULT, view

        # Compaction with recall hints: the view names the record to recall,
        # and recall gives it back byte for byte.
        compacted = json.loads(
            await tool(
                client, "compact", conversation="chat", tool_calls="strip",
                recall_hints=True, from_turn=0, to_turn=1,
            )
        )
        assert compacted["status"] == "stored" and compacted["head"], compacted
        view = await tool(client, "get_view", conversation="chat", format="text")
        assert "(recall 3)" in view and "quokkafrobnicate" not in view, view
        recalled = await tool(client, "recall", conversation="chat", handle="3")
        assert RESULT in recalled, recalled
        as_of = await tool(client, "get_view", conversation="chat", format="ndjson", as_of="7")
        assert json.loads(as_of.splitlines()[3])["content"] == RESULT, as_of

        # Search finds the stripped result and says the view strips it.
        hits = json.loads(await tool(client, "search", query="quokkafrobnicate"))
        assert [(h["name"], h["seq"], h["view"]) for h in hits] == [("chat", 3, "stripped")], hits

        # Diff: the view before the compaction against the view after it.
        diff = json.loads(await tool(client, "diff", a="chat@7", b="chat"))
        assert diff["tokens_b"] < diff["tokens_a"], diff
        assert any(c["seqs"] for t in diff["turns"] for c in t["changes"]), diff

        # Errors are tool errors, and the server goes on.
        assert "nosuch" in await tool_error(client, "get_view", conversation="nosuch")
        assert "999" in await tool_error(client, "recall", conversation="chat", handle="999")
        bogus = await tool_error(client, "append", conversation="chat", events=[{"type": "bogus"}])
        assert bogus.startswith("event 0: "), bogus
        # An argument of the wrong type is refused, never taken for an
        # absent one: a dry run of "yes" stores nothing.
        for name, arguments, said in [
            ("compact", {"conversation": "chat", "tool_calls": "strip", "dry_run": "yes"},
             "`dry_run` must be a boolean, not a string"),
            ("compact", {"conversation": "chat", "tool_calls": "strip", "from_turn": "4"},
             "`from_turn` must be an integer"),
            ("compact", {"conversation": "chat", "tool_calls": "strip", "from_turn": -1},
             "`from_turn` must be at least 0"),
            ("compact", {"conversation": "chat", "tool_calls": "strip", "to_turn": 4.5},
             "`to_turn` must be an integer, not a fractional number"),
            ("compact", {"conversation": "chat", "tool_calls": "strip", "from_turn": 1, "to_turn": 0},
             "the range is inverted"),
            ("compact", {"conversation": "chat", "summary": " ", "from_turn": 0, "to_turn": 0},
             "`summary`: an empty text"),
            ("compact", {"conversation": "chat", "summary": "padding " * 500, "from_turn": 0, "to_turn": 0},
             "inflated: the compaction would not shrink the view"),
            ("list_conversations", {"colour": "red"}, "(this tool takes none)"),
            ("compact", {"conversation": "chat", "tool_calls": "shred"},
             "`tool_calls`: \"shred\" is not one of"),
            ("append", {"conversation": "chat", "events": EVENTS[:1], "expect_head": 12345},
             "`expect_head` must be a string"),
            ("append", {"conversation": 123, "events": EVENTS[:1]},
             "`conversation` must be a string"),
            ("get_view", {"conversation": "chat", "as_of": 5}, "`as_of` must be a string"),
            ("get_view", {"conversation": "chat", "colour": "red"}, "unknown argument `colour`"),
            ("search", {"query": "quokkafrobnicate", "kind": "user"}, "`kind` must be an array"),
            ("search", {"query": "quokkafrobnicate", "kind": ["nope"]}, "`kind[0]`"),
            ("search", {"query": "quokkafrobnicate", "limit": 0}, "`limit` must be at least 1"),
            ("search", {"query": "quokkafrobnicate", "limit": 100000}, "at most 1000"),
            ("recall", {"conversation": "chat", "handle": "3", "max_tokens": "abc"},
             "`max_tokens` must be an integer"),
        ]:
            message = await tool_error(client, name, **arguments)
            assert said in message, (name, arguments, message)
        after = json.loads(await tool(client, "list_conversations"))
        assert [c["records"] for c in after if c["name"] == "chat"] == [len(EVENTS) + 1], after
        # null is an argument not given; since takes what --since takes.
        await tool(client, "get_view", conversation="chat", profile=None)
        assert "quokkafrobnicate" in await tool(client, "search", query="quokkafrobnicate", since="1w")

        # A subscriber hears of a write made by another process, even one
        # made the moment the subscription is answered, under the URI it
        # subscribed with (by id, or by name).
        by_name = "convstore://conversations/chat/log"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await client.subscribe_resource(chat["view"])
            await client.subscribe_resource(by_name)
        append_from_another_process("chat", [{"type": "user", "text": "One more thing."}])
        with anyio.fail_after(20):
            while chat["view"] not in updated or by_name not in updated:
                await anyio.sleep(0.1)


async def listen_stream() -> None:
    async with Client(SERVER) as client:
        listed = json.loads(await tool(client, "list_conversations"))
        uri = next(c["log"] for c in listed if c["name"] == "chat")
        async with client.listen(resource_subscriptions=[uri]) as subscription:
            await anyio.sleep(1)
            append_from_another_process("chat", [{"type": "assistant", "text": "Noted."}])
            with anyio.fail_after(20):
                async for event in subscription:
                    if uri in str(event):
                        break


async def main() -> None:
    await tools_and_resources()
    await listen_stream()
    print("ok")


asyncio.run(main())
