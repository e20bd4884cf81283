"""Bounds on a pickle's shape, checked over its opcodes before anything is built.

The restricted unpickler refuses code, but the objects a stream builds can still hurt: CPython
hashes a tuple by recursing into it without a depth check, so a dict key nested 100,000 tuples
deep crashes the process (SIGSEGV), and a key built from shared references (t = (t, t), forty
times over the memo) is a DAG whose hash walks 2**40 nodes.  So the stream is first run on an
abstract stack that holds, for each object, only its nesting depth and its size unfolded as a tree:

- at most MAX_OPCODES opcodes (the HAPT file has 20,023);
- no object nested deeper than MAX_DEPTH levels (the HAPT file's deepest: 16);
- no object whose unfolded size exceeds MAX_UNFOLDED (shared references counted every time;
  the HAPT file's largest: 24,888);
- dict keys and set members are strings, bytes, numbers, booleans or None: hashing them is
  linear in their length;
- no container changes after it was placed in another (what a cycle needs; pickle.dumps of a
  tree never does it), so the depths and sizes computed here are the real ones.

Opcode arguments are skipped, not decoded: the scan of the 100 MB HAPT stream takes 0.04 s.
"""

import pickle
import pickletools
import struct

MAX_OPCODES = 1_000_000
MAX_DEPTH = 64
MAX_UNFOLDED = 1_000_000



class PickleRefused(pickle.UnpicklingError):
    """The stream needs something the restricted unpickler does not allow (re-exported by unpickle.py)."""


_MARK = object()
_OPS = {op.code.encode("latin-1"): op for op in pickletools.opcodes}
_ATOMS = {
    "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "STRING", "BINSTRING", "SHORT_BINSTRING",
    "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8",
    "FLOAT", "BINFLOAT", "NONE", "NEWTRUE", "NEWFALSE", "BYTEARRAY8",
}  # fmt: skip
_EMPTY = {"EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET", "EMPTY_TUPLE"}
_FROM_MARK = {"LIST", "TUPLE", "DICT", "FROZENSET", "INST", "OBJ"}  # build one object from the items above the mark
_KEYED = {"DICT", "FROZENSET"}  # their items (DICT: every other one) are hashed
_TUPLE_N = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}
_GLOBALS = {"GLOBAL", "STACK_GLOBAL", "EXT1", "EXT2", "EXT4"}


class _Obj:
    """What the scan knows of one object: hashable in linear time (atom), depth, unfolded size."""

    __slots__ = ("atom", "depth", "leaf", "nested", "size")

    def __init__(self, atom: bool = False, leaf: bool = False) -> None:
        self.atom, self.leaf, self.nested = atom, atom or leaf, False
        self.depth, self.size = 0 if self.leaf else 1, 1


def check(data: bytes) -> tuple[int, int]:
    """Raise PickleRefused unless the pickle in ``data`` stays inside the bounds above; else
    return the loaded object's nesting depth and unfolded size, as the scan computed them."""
    stack: list = []
    memo: dict[int, _Obj] = {}
    pos = count = 0
    while True:
        if pos >= len(data):
            raise PickleRefused("malformed pickle (it ends without a STOP opcode)")
        op = _OPS.get(data[pos:pos + 1])
        if op is None:
            raise PickleRefused(f"malformed pickle (unknown opcode {data[pos:pos + 1]!r} at byte {pos})")
        count += 1
        if count > MAX_OPCODES:
            raise PickleRefused(f"more than {MAX_OPCODES:,} opcodes (the HAR file has about 20,000)")
        pos, arg = _argument(op, data, pos + 1)
        name = op.name
        try:
            if name in _ATOMS:
                stack.append(_Obj(atom=True))
            elif name in _EMPTY:
                stack.append(_Obj())
            elif name == "MARK":
                stack.append(_MARK)
            elif name in _FROM_MARK:
                items = _pop_mark(stack)
                if name in _KEYED:
                    _keys(items[::2] if name == "DICT" else items)
                stack.append(_add(_Obj(), items))
            elif name in _TUPLE_N:
                n = _TUPLE_N[name]
                items = [_pop(stack) for _ in range(n)][::-1]
                stack.append(_add(_Obj(), items))
            elif name in ("APPEND", "SETITEM", "BUILD"):
                items = [_pop(stack)] if name != "SETITEM" else [_pop(stack), _pop(stack)][::-1]
                if name == "SETITEM":
                    _keys(items[:1])
                _add(_top(stack), items)
            elif name in ("APPENDS", "SETITEMS", "ADDITEMS"):
                items = _pop_mark(stack)
                if name != "APPENDS":
                    _keys(items[::2] if name == "SETITEMS" else items)
                _add(_top(stack), items)
            elif name in ("REDUCE", "NEWOBJ"):
                args, callable_ = _pop(stack), _pop(stack)
                stack.append(_add(_Obj(), [callable_, args]))
            elif name == "NEWOBJ_EX":
                kwargs, args, cls = _pop(stack), _pop(stack), _pop(stack)
                stack.append(_add(_Obj(), [cls, args, kwargs]))
            elif name in _GLOBALS:
                if name == "STACK_GLOBAL":
                    _pop(stack), _pop(stack)
                stack.append(_Obj(leaf=True))  # a class or function: never filled, hashed by identity
            elif name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
                memo[len(memo) if arg is None else arg] = _top(stack)
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                if arg not in memo:
                    raise PickleRefused(f"malformed pickle (memo {arg} read before it was written)")
                stack.append(memo[arg])
            elif name == "POP":
                _pop(stack, mark_ok=True)
            elif name == "POP_MARK":
                _pop_mark(stack)
            elif name == "DUP":
                stack.append(_top(stack))
            elif name in ("PERSID", "BINPERSID"):
                raise PickleRefused("persistent ids are not allowed")
            elif name in ("NEXT_BUFFER", "READONLY_BUFFER"):
                raise PickleRefused("out-of-band buffers are not allowed")
            elif name == "STOP":
                if len(stack) != 1 or stack[0] is _MARK:
                    raise PickleRefused("malformed pickle (STOP with other than one object on the stack)")
                return stack[0].depth, stack[0].size
            elif name not in ("PROTO", "FRAME"):
                raise PickleRefused(f"opcode {name} is not allowed")
        except IndexError:
            raise PickleRefused(f"malformed pickle ({name} at byte {pos} with too few items on the stack)") from None


def _argument(op, data: bytes, pos: int) -> tuple[int, int | None]:
    """Skip ``op``'s argument; return the next position and the argument when it is a memo index."""
    n = op.arg.n if op.arg is not None else 0
    name = op.name
    if n >= 0:
        end = pos + n
        if end > len(data):
            raise PickleRefused(f"malformed pickle ({name} truncated)")
        if name in ("BINPUT", "BINGET"):
            return end, data[pos]
        if name in ("LONG_BINPUT", "LONG_BINGET"):
            return end, struct.unpack_from("<I", data, pos)[0]
        return end, None
    if n == pickletools.UP_TO_NEWLINE:
        lines = 2 if name in ("GLOBAL", "INST") else 1
        end = pos
        for _ in range(lines):
            newline = data.find(b"\n", end)
            if newline < 0:
                raise PickleRefused(f"malformed pickle ({name} truncated)")
            end = newline + 1
        if name in ("PUT", "GET"):
            try:
                return end, int(data[pos:end - 1])
            except ValueError:
                raise PickleRefused(f"malformed pickle ({name} with a bad index)") from None
        return end, None
    width, fmt = {pickletools.TAKEN_FROM_ARGUMENT1: (1, "<B"), pickletools.TAKEN_FROM_ARGUMENT4: (4, "<i"),
                  pickletools.TAKEN_FROM_ARGUMENT4U: (4, "<I"), pickletools.TAKEN_FROM_ARGUMENT8U: (8, "<Q")}[n]
    if pos + width > len(data):
        raise PickleRefused(f"malformed pickle ({name} truncated)")
    (length,) = struct.unpack_from(fmt, data, pos)
    end = pos + width + length
    if length < 0 or end > len(data):
        raise PickleRefused(f"malformed pickle ({name} truncated)")
    return end, None


def _pop(stack: list, mark_ok: bool = False):
    item = stack.pop()
    if item is _MARK and not mark_ok:
        raise PickleRefused("malformed pickle (an object expected, a mark found)")
    return item


def _top(stack: list) -> _Obj:
    item = stack[-1]
    if item is _MARK:
        raise PickleRefused("malformed pickle (an object expected, a mark found)")
    return item


def _pop_mark(stack: list) -> list:
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is _MARK:
            items = stack[i + 1:]
            del stack[i:]
            return items
    raise PickleRefused("malformed pickle (no mark to pop to)")


def _keys(items: list) -> None:
    if not all(item.atom for item in items):
        raise PickleRefused("dict keys and set members must be strings, bytes, numbers or None")


def _add(target: _Obj, items: list) -> _Obj:
    """Put ``items`` in ``target``: its depth and unfolded size grow, checked against the bounds."""
    if target.leaf:
        return target  # a string, number or global takes no items: the load itself refuses this
    if items and target.nested:
        raise PickleRefused("a container changed after it was placed in another (cycles are not allowed)")
    for item in items:
        if item is target:
            raise PickleRefused("a container placed in itself (cycles are not allowed)")
        target.depth = max(target.depth, item.depth + 1)
        target.size = min(target.size + item.size, MAX_UNFOLDED + 1)
        item.nested = True
    if target.depth > MAX_DEPTH:
        raise PickleRefused(f"objects nested deeper than {MAX_DEPTH} levels (the HAR file needs 16)")
    if target.size > MAX_UNFOLDED:
        raise PickleRefused(f"shared references unfold to more than {MAX_UNFOLDED:,} objects")
    return target
