"""Which torch tensors a save may read bytes from: an allowlist, not a denylist (issue 20).

Every route that turns a torch tensor into array bytes (``Checkpoint.save``,
``save_async``'s snapshot, ``progress=``, the archive form, remote locations,
``RunCheckpointer``, ``Rotation``, the converters, tensors nested in plain dicts,
lists, named tuples or optimizer state, each rank's DTensor block) goes through
:func:`~.torch_tensors.tensor_to_numpy` (a module's state dict through
:func:`~.torch_tensors.plain_tensors_to_numpy`, the same conversion for a whole
mapping), which calls :func:`dense_host_tensor` before it reads a byte. A tensor
is read only when all of this is proven, with torch's own predicates:

* its type is exactly ``torch.Tensor`` or ``torch.nn.Parameter`` (and a
  parameter's ``.data`` is exactly a ``torch.Tensor``): no wrapper subclass
  (``DTensor``, ``FakeTensor``, ``FunctionalTensor``, a jagged ``NestedTensor``),
  no other subclass;
* its layout is ``torch.strided`` and it is not on the ``meta`` device;
* its dispatch keys are only a backend's dense key, its autograd and autocast
  keys, ``ADInplaceOrView``, ``Conjugate`` and ``Negative`` (the last two are
  resolved into a fresh tensor): nothing batched or grad-wrapped by
  ``torch.func``, nothing functionalized, quantized, nested, sparse, or a
  ``ZeroTensor``;
* its storage is its own and holds its elements: the storage's data pointer can
  be read and is not null, the tensor's data pointer is the storage's plus its
  offset, and every element it addresses lies inside the storage's bytes. A
  parameter whose ``.data`` was replaced by a DTensor (``p.data =
  distribute_tensor(...)``) keeps a storage without data and is refused here; so
  is a tensor whose storage was freed (``untyped_storage().resize_(0)``).

A tensor on another device (CUDA) passes the same checks, then is copied to the
host once; the copy is checked again. The few torch operations this takes run
outside any active Python dispatch mode (:func:`outside_dispatch_modes`): a save
called under ``FakeTensorMode`` (tracing, ``torch.compile`` tooling) reads the
real tensors' real bytes instead of failing inside the mode, and fake tensors
themselves are refused by type above. Everything else raises
:class:`~opencheckpoint.format.errors.UnsupportedValue` naming what the tensor is and
the fix. A DTensor never reaches this module on the save path: the torch adapter
sends it to its sharded path (:mod:`.torch_dtensor`) first.

>>> import torch
>>> dense_host_tensor(torch.arange(3)).tolist()
[0, 1, 2]
>>> try:
...     dense_host_tensor(torch.empty(2, device="meta"))
... except UnsupportedValue as exc:
...     print(str(exc)[:60])
UnsupportedValue: cannot store a meta tensor: it has a shape
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import torch
from torch.utils._python_dispatch import _disable_current_modes

from ..format.errors import UnsupportedValue
from ..tree.refusals import refuse

__all__ = ["COLLECTIVE_FIX", "check_dense", "dense_host_tensor", "outside_dispatch_modes"]

#: The collective form of a save, named by every refusal of a distributed value.
COLLECTIVE_FIX: Final = ("call Checkpoint(...).save(path) on every rank of the process group, with the same path "
                         "(the collective form; docs: Scaling out, \"Saving from every rank\")")

#: Dispatch keys a plain dense tensor of each device may carry besides its backend's own (checked by name).
_COMMON_KEYS: Final = frozenset({"ADInplaceOrView", "Conjugate", "Negative"})
#: device type -> the name of its dense backend key (``CPU`` gives ``AutogradCPU`` and ``AutocastCPU`` too).
_BACKENDS: Final = {"cpu": "CPU", "cuda": "CUDA", "xpu": "XPU", "mps": "MPS", "hpu": "HPU", "mtia": "MTIA",
                    "privateuseone": "PrivateUse1"}
#: raw dispatch key sets already judged: one lookup per tensor on the hot path.
_JUDGED: dict[int, str | None] = {}


@contextmanager
def outside_dispatch_modes() -> Iterator[None]:
    """Run torch operations on real tensors with every active Python dispatch mode set aside.

    Under ``FakeTensorMode`` even ``detach()`` of a real tensor raises torch's ``AssertionError``; the
    bytes a save reads are a real tensor's whatever mode the caller is in, so the modes are popped for
    the copy-free conversions and pushed back after (torch's own ``_disable_current_modes``; it exists
    since torch 2.0, and no public equivalent does).

    >>> from torch._subclasses.fake_tensor import FakeTensorMode
    >>> with FakeTensorMode():
    ...     with outside_dispatch_modes():
    ...         dense_host_tensor(torch.arange(2.0, requires_grad=True)).tolist()
    [0.0, 1.0]
    """
    if not torch._C._len_torch_dispatch_stack():  # the common case: nothing to set aside
        yield
        return
    with _disable_current_modes():
        yield


def dense_host_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as a CPU tensor without autograd history proven to hold its values in its own storage (no
    copy for a CPU tensor without conjugate or negative bit); :class:`UnsupportedValue` for any other tensor."""
    check_dense(tensor)
    if tensor.requires_grad:
        tensor = tensor.detach()  # same storage: what was proven holds
    fresh = False
    if not tensor.is_cpu:
        tensor = tensor.cpu()  # a device tensor has no host memory to share: one copy is unavoidable
        _check_keys(tensor)
        fresh = True
    # Lazy conjugate / negative views are flags, not bits: materialized into a fresh tensor.
    if tensor.is_conj():
        tensor, fresh = tensor.resolve_conj(), True
    if tensor.is_neg():
        tensor, fresh = tensor.resolve_neg(), True
    if fresh:
        _check_storage(tensor)
    return tensor


def check_dense(tensor: torch.Tensor) -> None:
    """Raise :class:`UnsupportedValue` unless ``tensor`` (on any device) is a plain dense tensor whose
    elements lie in its own storage; nothing is read or copied."""
    kind = type(tensor)
    if kind is not torch.Tensor and kind is not torch.nn.Parameter:
        raise _subclass(tensor)
    if kind is torch.nn.Parameter and type(tensor.data) is not torch.Tensor:
        raise _subclass(tensor.data)
    if tensor.layout is not torch.strided:
        raise refuse(f"cannot store a {tensor.layout} tensor: its values are not one strided block of its "
                     "storage; convert it with .to_dense() first")
    if tensor.is_meta:
        raise refuse("cannot store a meta tensor: it has a shape but no data (materialize it first, e.g. "
                     "module.to_empty(device='cpu') and initialize or load it)")
    _check_keys(tensor)
    _check_storage(tensor)


def _subclass(tensor: torch.Tensor) -> UnsupportedValue:
    kind = type(tensor)
    name = f"{kind.__module__}.{kind.__qualname__}"
    if kind.__name__ == "DTensor":
        fix = (f"a DTensor is saved as a sharded array only by a collective save: {COLLECTIVE_FIX}; or store "
               ".full_tensor() from one process")
    elif kind.__name__ in ("FakeTensor", "FunctionalTensor"):
        fix = "it has no real data: save the real model outside the tracing/compilation context"
    elif kind.__name__ == "NestedTensor":
        fix = "store its components (tensor.unbind()) as a list of tensors"
    else:
        fix = "if its data is its own storage, store tensor.as_subclass(torch.Tensor); otherwise convert it"
    return refuse(f"cannot store a {name}: a tensor subclass whose values are not known to be in its own "
                  f"storage; {fix}")


def _check_keys(tensor: torch.Tensor) -> None:
    """Refuse a tensor whose dispatch keys are not those of a plain dense tensor of its device."""
    keys = torch._C._dispatch_keys(tensor)
    raw = keys.raw_repr()  # the backend bits name the device: one judgement per key set
    problem = _JUDGED[raw] if raw in _JUDGED else _JUDGED.setdefault(raw, _judge(tensor.device.type, str(keys)))
    if problem is not None:
        raise refuse(problem)


def _judge(device: str, keys: str) -> str | None:
    """Why a tensor with the dispatch keys ``keys`` (``DispatchKeySet(CPU, ...)``) is refused; None if not."""
    names = {name.strip() for name in keys[keys.index("(") + 1 : keys.rindex(")")].split(",") if name.strip()}
    backend = _BACKENDS.get(device)
    allowed = _COMMON_KEYS | ({backend, f"Autograd{backend}", f"Autocast{backend}"} if backend else set())
    extra = sorted(names - allowed)
    if not extra:
        return None
    what = ("a ZeroTensor (torch._efficientzerotensor): it has no storage; store torch.zeros(tensor.shape, "
            "dtype=tensor.dtype) instead" if "ZeroTensor" in extra else
            "a quantized tensor: dequantize it (tensor.dequantize()) or store its int_repr() and scales"
            if any(k.startswith("Quantized") for k in extra) else
            "a nested tensor: store its components (tensor.unbind()) as a list" if any("Nested" in k for k in extra)
            else "a tensor batched or wrapped by torch.func (vmap, grad): save outside the transform"
            if any(k.startswith("FuncTorch") for k in extra) else
            "a functionalized tensor: save outside torch.compile / functionalization" if "Functionalize" in extra
            else f"a tensor on {device} whose values are not a plain dense block of its storage: copy it with "
                 ".cpu() (or .to_dense()) first")
    return f"cannot store {what} (its dispatch keys include {', '.join(extra)})"


def _check_storage(tensor: torch.Tensor) -> None:
    """Refuse a tensor whose elements are not proven to lie in its own, allocated storage.

    Nothing is read here: only the storage's pointer and size, the tensor's pointer,
    offset, shape and strides are compared.
    """
    count = tensor.numel()
    if not count:
        return  # no byte is read
    try:
        storage = tensor.untyped_storage()
        base = storage.data_ptr()
    except (RuntimeError, NotImplementedError, TypeError) as exc:
        raise refuse("cannot store this tensor: its storage holds no data of its own (a tensor whose .data was "
                     "set to a DTensor or another tensor subclass, e.g. p.data = distribute_tensor(...), keeps a "
                     "storage without data; assign nn.Parameter(distribute_tensor(...)) with setattr or use "
                     f"distribute_module, then {COLLECTIVE_FIX}) ({exc})") from None
    itemsize = tensor.element_size()
    offset = tensor.storage_offset()
    if tensor.is_contiguous():  # the common case: its elements are the next ``count`` of the storage
        last, lowest = offset + count - 1, 0
    else:
        strides = tensor.stride()
        last = offset + sum((n - 1) * s for n, s in zip(tensor.shape, strides, strict=True))
        lowest = min(strides, default=0)
    if (not base or offset < 0 or lowest < 0 or (last + 1) * itemsize > storage.nbytes()
            or tensor.data_ptr() != base + offset * itemsize):
        raise refuse(f"cannot store this tensor: its {tensor.numel()} elements are not inside its storage "
                     f"({storage.nbytes()} bytes at {'a null pointer' if not base else 'its data pointer'}; a "
                     "storage freed with resize_(0), as FSDP1 does outside summon_full_params, or replaced "
                     "through .data); store a tensor that holds its values (tensor.clone() where it still does)")
