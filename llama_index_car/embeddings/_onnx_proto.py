"""A minimal ONNX ``ModelProto`` writer (protobuf wire format), so no ``onnx`` package is needed.

Only what the e5 graph uses is written: nodes with int / float / ints attributes, initializers
as ``raw_data`` tensors, and float inputs/outputs with named or fixed dimensions. Field numbers
are those of ``onnx/onnx.proto`` (ModelProto.ir_version=1, opset_import=8, graph=7;
GraphProto.node=1, name=2, initializer=5, input=11, output=12; NodeProto.input=1, output=2,
name=3, op_type=4, attribute=5, domain=7; AttributeProto.name=1, f=2, i=3, ints=8, type=20;
TensorProto.dims=1, data_type=2, name=8, raw_data=9; ValueInfoProto.name=1, type=2;
TypeProto.tensor_type=1; Tensor.elem_type=1, shape=2; TensorShapeProto.dim=1;
Dimension.dim_value=1, dim_param=2; OperatorSetIdProto.domain=1, version=2).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

#: TensorProto.DataType codes
_DTYPES = {np.dtype(np.float32): 1, np.dtype(np.uint8): 2, np.dtype(np.int8): 3, np.dtype(np.int64): 7}
_ATTR_FLOAT, _ATTR_INT, _ATTR_INTS = 1, 2, 7


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field_no: int, wire: int) -> bytes:
    return _varint(field_no << 3 | wire)


def _int(field_no: int, n: int) -> bytes:
    return _key(field_no, 0) + _varint(n)


def _bytes(field_no: int, data: bytes) -> bytes:
    return _key(field_no, 2) + _varint(len(data)) + data


def _str(field_no: int, s: str) -> bytes:
    return _bytes(field_no, s.encode("utf-8"))


def _attribute(name: str, value: int | float | list[int]) -> bytes:
    out = _str(1, name)
    if isinstance(value, bool) or isinstance(value, int):
        return out + _int(3, int(value)) + _int(20, _ATTR_INT)
    if isinstance(value, float):
        return out + _key(2, 5) + struct.pack("<f", value) + _int(20, _ATTR_FLOAT)
    return out + b"".join(_int(8, int(v)) for v in value) + _int(20, _ATTR_INTS)


def _tensor(name: str, arr: np.ndarray) -> bytes:
    code = _DTYPES.get(arr.dtype)
    if code is None:
        raise TypeError(f"initializer {name!r}: dtype {arr.dtype} is not supported")
    dims = b"".join(_int(1, int(d)) for d in arr.shape)
    data = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
    return dims + _int(2, code) + _str(8, name) + _bytes(9, data)


def _value_info(name: str, dims: list[int | str]) -> bytes:
    shape = b"".join(
        _bytes(1, _str(2, d) if isinstance(d, str) else _int(1, d)) for d in dims
    )
    tensor_type = _int(1, 1) + _bytes(2, shape)  # elem_type FLOAT
    return _str(1, name) + _bytes(2, _bytes(1, tensor_type))


@dataclass
class GraphWriter:
    """Collects nodes and initializers; :meth:`model` returns the serialised ``ModelProto``."""

    nodes: list[bytes] = field(default_factory=list)
    inits: list[bytes] = field(default_factory=list)
    _n: int = 0

    def init(self, name: str, arr: np.ndarray) -> str:
        self.inits.append(_bytes(5, _tensor(name, arr)))
        return name

    def node(
        self,
        op: str,
        inputs: list[str],
        *,
        domain: str = "",
        **attrs: int | float | list[int],
    ) -> str:
        """Append one node with a fresh output name, which is returned."""
        self._n += 1
        out = f"{op.lower()}_{self._n}"
        body = b"".join(_str(1, i) for i in inputs) + _str(2, out) + _str(3, f"n{self._n}")
        body += _str(4, op) + b"".join(_bytes(5, _attribute(k, v)) for k, v in attrs.items())
        if domain:
            body += _str(7, domain)
        self.nodes.append(_bytes(1, body))
        return out

    def model(
        self,
        inputs: dict[str, list[int | str]],
        outputs: dict[str, tuple[str, list[int | str]]],
        opsets: dict[str, int],
        ir_version: int = 8,
    ) -> bytes:
        """The model; ``outputs`` maps a graph output name to (the node output it copies, dims)."""
        tail = []
        for name, (src, _) in outputs.items():
            tail.append(
                _bytes(1, _str(1, src) + _str(2, name) + _str(3, f"out_{name}") + _str(4, "Identity"))
            )
        graph = b"".join(self.nodes) + b"".join(tail) + _str(2, "graph") + b"".join(self.inits)
        graph += b"".join(_bytes(11, _value_info(n, d)) for n, d in inputs.items())
        graph += b"".join(_bytes(12, _value_info(n, d)) for n, (_, d) in outputs.items())
        ops = b"".join(_bytes(8, (_str(1, d) if d else b"") + _int(2, v)) for d, v in opsets.items())
        return _int(1, ir_version) + _str(2, "llama-index-car") + ops + _bytes(7, graph)
