"""Each script carries the prologues it uses and no other (taskq.broker.scripts.script_text):
checked by compiling every script as Redis runs it with Lua 5.1, Redis's Lua, and listing the
globals its bytecode reads. A helper left out would be read as a global, which Redis's
sandbox refuses at run time, on whatever path first calls it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from taskq.broker import scripts

LUA = Path(scripts.__file__).parent / "lua"
SCRIPTS = sorted(p.stem for p in LUA.glob("*.lua") if not p.stem.startswith("_"))
REDIS_GLOBALS = {
    # what Redis's Lua sandbox gives a script: its API, its libraries, Lua's base functions
    "redis", "KEYS", "ARGV", "cjson", "cmsgpack", "bit", "struct",
    "string", "table", "math",
    "assert", "error", "ipairs", "next", "pairs", "pcall", "rawequal", "rawget", "rawset",
    "select", "tonumber", "tostring", "type", "unpack", "xpcall",
}  # fmt: skip
LUAC = shutil.which("luac5.1")


def _globals(text: str, tmp_path: Path) -> tuple[set[str], set[str]]:
    """The globals a script's bytecode reads and writes."""
    source = tmp_path / "script.lua"
    source.write_text(text)
    listing = subprocess.run(
        [str(LUAC), "-p", "-l", str(source)], capture_output=True, text=True, check=True
    ).stdout
    found = re.findall(r"\b(GETGLOBAL|SETGLOBAL)\b[^;\n]*; (\S+)", listing)
    return {n for op, n in found if op == "GETGLOBAL"}, {n for op, n in found if op == "SETGLOBAL"}


@pytest.mark.skipif(LUAC is None, reason="needs luac5.1 (Debian's lua5.1; .ci/run installs it)")
@pytest.mark.parametrize("name", SCRIPTS)
def test_a_script_reads_no_global_but_redis_lua_s_own(name: str, tmp_path: Path) -> None:
    reads, writes = _globals(scripts.script_text(name), tmp_path)
    assert reads <= REDIS_GLOBALS, f"{name}.lua reads undefined {sorted(reads - REDIS_GLOBALS)}"
    assert not writes, f"{name}.lua creates globals {sorted(writes)}"


@pytest.mark.skipif(LUAC is None, reason="needs luac5.1 (Debian's lua5.1; .ci/run installs it)")
def test_a_prologue_left_out_shows_as_a_global_read(tmp_path: Path) -> None:
    """The check above can fail: enqueue.lua without its record helpers reads them as
    globals."""
    record = (LUA / "_record.lua").read_text()
    text = scripts.script_text("enqueue").replace(record, "")
    reads, _ = _globals(text, tmp_path)
    assert "fresh_record" in reads - REDIS_GLOBALS


def test_a_script_carries_only_the_prologues_it_uses() -> None:
    def carried(name: str) -> list[str]:
        text = scripts.script_text(name)
        return [p for p in scripts.PROLOGUES if (LUA / f"{p}.lua").read_text() in text]

    assert carried("enqueue") == ["_now", "_record"]
    assert carried("heartbeat") == ["_now"]
    assert carried("checkpoint") == ["_fence"]
    # fetch.lua ends records and runs a success's workflow ops (which stage fair jobs and
    # read streams): those prologues come in through _flow's own uses, in PROLOGUES order.
    assert carried("fetch") == ["_now", "_stream", "_record", "_fair", "_flow"]
    assert scripts.script_text("fetch").endswith((LUA / "fetch.lua").read_text())
