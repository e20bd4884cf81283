"""The unpickler's bounds (picluster.data.har.prescan): deep and shared-reference pickles are refused
in one line before CPython builds them; plain data within the bounds loads unchanged."""

import pickle
import subprocess
import sys
import time
from unittest.mock import patch

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from picluster.data.har import prescan
from picluster.data.har.unpickle import PickleRefused, restricted_loads

from har_synthetic import hapt_pickle, recording_columns, write_gz

PROTO2 = b"\x80\x02"


def deep_tuple_key(depth: int) -> bytes:
    """{((((),),),...): 1}: CPython hashes the key recursively, without a depth check."""
    return PROTO2 + b"}" + b")" + b"\x85" * depth + b"K\x01s."


def shared_tuple_key(doublings: int) -> bytes:
    """{t: 1} with t = (t, t) ``doublings`` times over the memo: 2**doublings nodes to hash."""
    body = b")" + b"q\x000h\x00h\x00\x86" * doublings  # BINPUT 0, POP, BINGET 0, BINGET 0, TUPLE2
    return PROTO2 + b"}" + body + b"K\x01s."


def _load_in_child(tmp_path, data: bytes, timeout: float = 60):
    """Load through the HAPT reader in a fresh interpreter: a crash must not take pytest with it."""
    path = write_gz(tmp_path / "HAPT.pkl.gz", data)
    code = ("import sys\nfrom picluster.data.har import hapt\nfrom picluster.util.errors import UsageError\n"
            f"try:\n    hapt.read_recordings(__import__('pathlib').Path({str(path)!r}))\n"
            "except UsageError as exc:\n    print(exc)\n    sys.exit(2)\n")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    return result, time.monotonic() - started


def test_a_deeply_nested_key_is_refused_not_a_segfault(tmp_path):
    result, _ = _load_in_child(tmp_path, deep_tuple_key(200_000))
    assert result.returncode == 2, (result.returncode, result.stderr[-500:])  # -11 (SIGSEGV) before the bound
    assert "nested deeper than 64 levels" in result.stdout and len(result.stdout.strip().splitlines()) == 1


def test_a_shared_reference_dag_is_refused_at_once(tmp_path):
    result, seconds = _load_in_child(tmp_path, shared_tuple_key(60), timeout=120)  # ran for minutes before the bound
    assert result.returncode == 2, (result.returncode, result.stderr[-500:])
    assert "unfold to more than 1,000,000 objects" in result.stdout
    assert seconds < 60


def test_deep_lists_and_cycles_are_refused():
    deep = PROTO2 + b"]" * 1000 + b"a" * 999 + b"."
    with pytest.raises(PickleRefused, match="nested deeper"):
        restricted_loads(deep)
    with pytest.raises(PickleRefused, match="cycles"):
        restricted_loads(pickle.dumps(_cycle(), protocol=2))
    with pytest.raises(PickleRefused, match="dict keys"):
        restricted_loads(PROTO2 + b"}" + b")\x85" + b"K\x01s.")  # a tuple as key: hashing it recurses
    assert restricted_loads(pickle.dumps([[[1]]] * 3, protocol=2)) == [[[1]]] * 3


def _cycle():
    a: list = []
    a.append(a)
    return a


def test_the_bounds_are_far_from_the_real_files_shape():
    import numpy as np

    columns = recording_columns(np.zeros((8, 3)), np.zeros((8, 3)), np.ones(8, np.int64))
    depth, size = prescan.check(hapt_pickle({1: [columns] * 3}))
    assert depth <= prescan.MAX_DEPTH // 3 and size < prescan.MAX_UNFOLDED // 20


# -- properties ---------------------------------------------------------------------------------

PLAIN = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8), st.binary(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner),
                            st.dictionaries(st.one_of(st.text(max_size=4), st.integers()), inner, max_size=4)),
    max_leaves=40,
)


@given(PLAIN, st.integers(3, 5))  # protocol 2 writes b"" as builtins.bytes(), which is not allowed
def test_plain_data_within_the_bounds_loads_unchanged(value, protocol):
    assert restricted_loads(pickle.dumps(value, protocol=protocol)) == value


# Streams that build containers, share them through the memo and nest them, generated valid by
# tracking what each stack slot holds: 'A' atom, 'L' list, 'D' dict, 'S' set, 'T' tuple or frozenset, 'M' mark.
def _stream(choices: list[int]) -> tuple[bytes, set[bytes]]:
    """A valid stream of OPS, and the ops it used."""
    stack, memo, out = ["M"], [], [b"\x80\x04("]

    def above_mark() -> list[str]:
        return stack[len(stack) - stack[::-1].index("M"):]

    for choice in choices:
        top = stack[-1]
        items = above_mark()
        below = stack[-len(items) - 2] if len(stack) >= len(items) + 2 else None
        op = OPS[choice % len(OPS)]
        if op in (b"K\x07", b"X\x01\x00\x00\x00k", b"N"):
            stack.append("A")
        elif op in (b"]", b"}", b"\x8f"):
            stack.append({b"]": "L", b"}": "D", b"\x8f": "S"}[op])
        elif op == b"(" and len(stack) < 40:
            stack.append("M")
        elif op in (b"\x85", b"\x86", b"\x87") and len(items) >= op[0] - 0x84:
            del stack[-(op[0] - 0x84):]
            stack.append("T")
        elif op == b"a" and len(items) >= 2 and stack[-2] == "L":
            stack.pop()
        elif op == b"s" and len(items) >= 3 and stack[-3] == "D" and stack[-2] == "A":
            del stack[-2:]
        elif op in (b"t", b"l", b"\x91") and "M" in stack[1:] and (op != b"\x91" or all(i == "A" for i in items)):
            del stack[len(stack) - len(items) - 1:]
            stack.append({b"t": "T", b"l": "L", b"\x91": "T"}[op])
        elif op in FILLS and below == FILLS[op] and _keys_ok(op, items):  # APPENDS, SETITEMS, ADDITEMS
            del stack[len(stack) - len(items) - 1:]
        elif op == b"\x94" and top != "M":
            memo.append(top)
        elif op == b"h" and memo:
            op = b"h" + bytes([choice % len(memo)])
            stack.append(memo[choice % len(memo)])
        elif op == b"0" and top != "M" and len(stack) > 1:
            stack.pop()
        else:
            continue
        out.append(op)
    out += [b"t"] * stack.count("M") + [b"."]
    return b"".join(out), {op[:1] for op in out}


FILLS = {b"e": "L", b"u": "D", b"\x90": "S"}


def _keys_ok(op: bytes, items: list[str]) -> bool:
    if op == b"u":
        return len(items) % 2 == 0 and all(k == "A" for k in items[::2])
    return op != b"\x90" or all(i == "A" for i in items)


OPS = [b"K\x07", b"X\x01\x00\x00\x00k", b"N", b"]", b"}", b"\x8f", b"(", b"\x85", b"\x86", b"\x87", b"a", b"s",
       b"t", b"l", b"\x91", b"e", b"u", b"\x90", b"\x94", b"h", b"0"]


def _walk(obj, path=()) -> tuple[float, int]:
    """Depth and size unfolded as a tree; a cycle is infinitely deep."""
    if any(obj is seen for seen in path):
        return float("inf"), 1
    if isinstance(obj, (list, tuple, set, frozenset)):
        children = list(obj)
    elif isinstance(obj, dict):
        children = [x for kv in obj.items() for x in kv]
    else:
        return 0, 1
    measured = [_walk(c, (*path, obj)) for c in children]
    return 1 + max((d for d, _ in measured), default=0), 1 + sum(s for _, s in measured)


@given(st.lists(st.integers(0, 10 * len(OPS)), max_size=120))
def test_the_scan_bounds_what_loads(choices):
    """Accepted: the loaded object is within the bounds, and the scan's depth and size are at least
    its own (equal for lists and tuples; sets and dicts may drop equal keys).  Refused: one line, a known reason."""
    data, used = _stream(choices)
    with patch.object(prescan, "MAX_DEPTH", 3), patch.object(prescan, "MAX_UNFOLDED", 20):
        try:
            loaded = restricted_loads(data)
        except PickleRefused as exc:
            event(f"refused: {str(exc)[:30]}")
            assert "\n" not in str(exc)
            assert any(reason in str(exc) for reason in ("nested deeper", "unfold", "changed after", "placed in itself")), exc
            return
        depth, size = _walk(loaded)
        event(f"loaded, depth {depth}")
        scan_depth, scan_size = prescan.check(data)
        assert depth <= scan_depth <= 3 and size <= scan_size <= 20
        if not used & {b"}", b"\x8f", b"\x91"}:  # no dict or set: nothing is deduplicated
            assert (scan_depth, scan_size) == (depth, size)


@given(st.binary(max_size=200), st.integers(0, 400))
def test_any_bytes_in_a_valid_pickle_give_data_or_one_refusal(noise, at):
    good = pickle.dumps({"a": [1, 2.5, "x", (None, b"y")], 2: {"b": []}}, protocol=2)
    data = good[:at] + noise + good[at:]
    try:
        restricted_loads(data)
    except PickleRefused as exc:
        assert "\n" not in str(exc)


@given(st.integers(1, 3 * prescan.MAX_DEPTH))
def test_nesting_is_refused_exactly_past_the_bound(depth):
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    data = pickle.dumps(value, protocol=2)
    if depth <= prescan.MAX_DEPTH:
        assert restricted_loads(data) == value
    else:
        with pytest.raises(PickleRefused, match="nested deeper"):
            restricted_loads(data)
