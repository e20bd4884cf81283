"""A restricted unpickler for the old pandas pickle in the HAPT package, with no pandas and no arbitrary code.

The file (pickle protocol 2) names twelve globals.  Each maps to a harmless stand-in here:
pandas classes become plain holders of their pickled state, and the numpy and builtin
callables are wrapped so they accept only the arguments such a file contains.  Any other
global, or a permitted one called with other arguments, stops the load with PickleRefused.
Before anything is built, ``prescan.check`` bounds the stream's work and its objects' nesting
depth and unfolded size (a deep or shared-reference structure crashed or stalled CPython).
"""

import codecs
import io
import pickle
from dataclasses import dataclass

import numpy as np

from picluster.data.har import prescan
from picluster.data.har.prescan import PickleRefused
from picluster.model import tokens

try:  # numpy >= 2
    from numpy._core.multiarray import _reconstruct as _np_reconstruct
except ImportError:  # pragma: no cover - numpy 1.x
    from numpy.core.multiarray import _reconstruct as _np_reconstruct  # type: ignore[no-redef]




class _Sealed:
    """What a stream can reach: no __dict__, no setattr, so BUILD cannot patch our classes or functions."""

    __slots__ = ("function", "label")
    label: str
    function: object

    def __init__(self, label: str, function=None) -> None:
        object.__setattr__(self, "label", label)
        object.__setattr__(self, "function", function)

    def __setattr__(self, name, value):
        raise PickleRefused(f"cannot set attributes on {self.label}")

    def __call__(self, *args):
        if not callable(self.function):
            raise PickleRefused(f"{self.label} cannot be called")
        return self.function(*args)

    def __repr__(self) -> str:
        return f"<allowed {self.label}>"


class Frame:
    """A pickled pandas DataFrame: only its block manager is kept."""

    def __setstate__(self, state):
        if not isinstance(state, dict) or not isinstance(state.get("_data"), BlockManager):
            raise PickleRefused("DataFrame state has no block manager")
        self.manager = state["_data"]

    def columns(self) -> dict[str, np.ndarray]:
        """Column name -> 1-D array, rebuilt from the blocks (each block is items x rows)."""
        manager = getattr(self, "manager", None)
        if manager is None:
            raise PickleRefused("DataFrame was never given its state")
        return manager.columns()


class BlockManager:
    """pandas' BlockManager state in the 0.14.1+ layout: axes and blocks with their column positions."""

    def __setstate__(self, state):
        if not (isinstance(state, tuple) and len(state) == 4 and isinstance(state[3], dict)):
            raise PickleRefused("unsupported BlockManager state layout")
        extra = state[3].get("0.14.1")
        if not isinstance(extra, dict) or "axes" not in extra or "blocks" not in extra:
            raise PickleRefused("unsupported BlockManager state layout")
        self.axes = extra["axes"]
        self.blocks = extra["blocks"]

    def columns(self) -> dict[str, np.ndarray]:
        if not (isinstance(self.axes, list) and len(self.axes) == 2):
            raise PickleRefused("a DataFrame needs two axes")
        names_axis, rows_axis = self.axes
        if not isinstance(names_axis, Index) or not isinstance(rows_axis, (Index, RangeIndex)):
            raise PickleRefused("unexpected DataFrame axes")
        names = names_axis.values.tolist()
        if not all(isinstance(n, str) for n in names):
            raise PickleRefused("column names must be strings")
        n_rows = len(rows_axis)
        out: dict[str, np.ndarray] = {}
        for block in self.blocks:
            if not isinstance(block, dict) or not isinstance(block.get("values"), np.ndarray):
                raise PickleRefused("unexpected block")
            values, locs = block["values"], block.get("mgr_locs")
            if isinstance(locs, slice):
                positions = list(range(*locs.indices(len(names))))
            elif isinstance(locs, np.ndarray) and locs.dtype.kind == "i":
                positions = [int(p) for p in locs.ravel()]
            else:
                raise PickleRefused("unexpected block locations")
            if values.ndim != 2 or values.shape != (len(positions), n_rows):
                raise PickleRefused(f"block of shape {values.shape} does not fit {len(positions)} columns x {n_rows} rows")
            for row, position in enumerate(positions):
                if not 0 <= position < len(names):
                    raise PickleRefused("block location outside the columns")
                out[names[position]] = values[row]
        if len(out) != len(names):
            raise PickleRefused("blocks do not cover every column")
        return out


@dataclass(frozen=True, slots=True)
class Index:
    values: np.ndarray
    name: object = None

    def __len__(self) -> int:
        return len(self.values)


@dataclass(frozen=True, slots=True)
class RangeIndex:
    start: int
    stop: int
    step: int = 1
    name: object = None

    def __len__(self) -> int:
        return len(range(self.start, self.stop, self.step))


# Classes appear in the stream only as arguments (to _reconstructor, _new_Index, numpy's
# _reconstruct), never to be called or patched, so each is a sealed token.
_OBJECT = _Sealed("builtins.object")
_NDARRAY = _Sealed("numpy.ndarray")
_INDEX = _Sealed("pandas.Index")
_RANGE_INDEX = _Sealed("pandas.RangeIndex")
_DATAFRAME = _Sealed("pandas.DataFrame")
_BLOCK_MANAGER = _Sealed("pandas.BlockManager")
_STATEFUL = {_DATAFRAME: Frame, _BLOCK_MANAGER: BlockManager}
# Numeric and object dtypes only: an old pandas frame holds nothing else that we read.
_DTYPE_KINDS = set("biufO")


def _reconstructor(cls, base, state):
    # copyreg._reconstructor(cls, object, None) is how protocol 2 creates an instance before BUILD.
    if not isinstance(cls, _Sealed) or cls not in _STATEFUL or base is not _OBJECT or state is not None:
        raise PickleRefused("copy_reg._reconstructor with unexpected arguments")
    return _STATEFUL[cls]()


def _new_index(cls, data):
    if not isinstance(data, dict):
        raise PickleRefused("_new_Index with unexpected arguments")
    if cls is _INDEX:
        values = data.get("data")
        if not isinstance(values, np.ndarray) or values.ndim != 1:
            raise PickleRefused("Index without 1-D data")
        return Index(values, data.get("name"))
    if cls is _RANGE_INDEX:
        bounds = [data.get(k, d) for k, d in (("start", 0), ("stop", None), ("step", 1))]
        if not all(type(b) is int for b in bounds) or bounds[2] == 0:
            raise PickleRefused("RangeIndex with unexpected bounds")
        start, stop, step = (int(b or 0) for b in bounds)  # checked above: ints
        return RangeIndex(start, stop, step, name=data.get("name"))
    raise PickleRefused("_new_Index of an unexpected class")


def _ndarray_reconstruct(subtype, shape, dtype_code):
    # numpy pickles an array as _reconstruct(ndarray, (0,), b'b') and then fills it by BUILD.
    if subtype is not _NDARRAY or shape != (0,) or dtype_code != b"b":
        raise PickleRefused("numpy _reconstruct with unexpected arguments")
    return _np_reconstruct(np.ndarray, shape, dtype_code)


def _dtype(code, align=0, copy=1):
    if not isinstance(code, str) or align not in (0, False) or copy not in (1, True):
        raise PickleRefused("numpy dtype with unexpected arguments")
    try:
        dtype = np.dtype(code)
    except TypeError as exc:
        raise PickleRefused(f"unknown dtype {tokens.show(code)}") from exc
    if dtype.kind not in _DTYPE_KINDS:
        raise PickleRefused(f"dtype {tokens.show(code)} is not allowed")
    return dtype


def _encode(text, encoding):
    # Python 3 writes bytes in protocol 2 as _codecs.encode(str, 'latin1'); other codecs are refused.
    if not isinstance(text, str) or encoding != "latin1":
        raise PickleRefused("_codecs.encode with unexpected arguments")
    return codecs.encode(text, "latin1")


def _slice(start, stop, step):
    if not all(v is None or type(v) is int for v in (start, stop, step)):
        raise PickleRefused("slice with unexpected arguments")
    return slice(start, stop, step)


# Both spellings: a protocol-2 stream uses Python 2 names (copy_reg, __builtin__), and the
# numpy module was renamed numpy._core in numpy 2.
_RECONSTRUCTOR = _Sealed("copyreg._reconstructor", _reconstructor)
_SLICE = _Sealed("builtins.slice", _slice)
_NP_RECONSTRUCT = _Sealed("numpy._reconstruct", _ndarray_reconstruct)
ALLOWED = {
    ("copy_reg", "_reconstructor"): _RECONSTRUCTOR,
    ("copyreg", "_reconstructor"): _RECONSTRUCTOR,
    ("__builtin__", "object"): _OBJECT,
    ("builtins", "object"): _OBJECT,
    ("__builtin__", "slice"): _SLICE,
    ("builtins", "slice"): _SLICE,
    ("_codecs", "encode"): _Sealed("_codecs.encode", _encode),
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _Sealed("numpy.dtype", _dtype),
    ("numpy.core.multiarray", "_reconstruct"): _NP_RECONSTRUCT,
    ("numpy._core.multiarray", "_reconstruct"): _NP_RECONSTRUCT,
    ("pandas.core.frame", "DataFrame"): _DATAFRAME,
    ("pandas.core.internals.managers", "BlockManager"): _BLOCK_MANAGER,
    ("pandas.core.indexes.base", "_new_Index"): _Sealed("pandas._new_Index", _new_index),
    ("pandas.core.indexes.base", "Index"): _INDEX,
    ("pandas.core.indexes.range", "RangeIndex"): _RANGE_INDEX,
}


class RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        try:
            return ALLOWED[(module, name)]
        except KeyError:
            raise PickleRefused(f"global {tokens.show(module)[1:-1]}.{tokens.show(name)[1:-1]} is not allowed") from None

    def persistent_load(self, pid):
        raise PickleRefused("persistent ids are not allowed")


def restricted_loads(data: bytes):
    """Unpickle ``data`` allowing only the stand-ins above, within prescan's bounds; any failure is PickleRefused."""
    prescan.check(data)
    try:
        return RestrictedUnpickler(io.BytesIO(data)).load()
    except PickleRefused:
        raise
    except Exception as exc:  # a malformed stream fails in many ways; the caller needs one
        raise PickleRefused(f"malformed pickle ({type(exc).__name__}: {tokens.show(str(exc))})") from exc


def restricted_load(stream):
    return restricted_loads(stream.read())
