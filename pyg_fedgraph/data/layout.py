"""Flat parameter layout of a client model.

Every server rule in :mod:`pyg_fedgraph` sees a client's model as one flat vector
:math:`\\theta_i \\in \\mathbb{R}^D`. :class:`ParamLayout` is the single place that
knows how that vector maps back to the named tensors of a :class:`torch.nn.Module`,
and which slice of it belongs to which layer.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

StateLike = nn.Module | Mapping[str, Tensor]

__all__ = ["ParamLayout"]


@dataclass(frozen=True)
class _Entry:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


class ParamLayout:
    r"""Maps a model's named parameters (and buffers) to flat vectors.

    A *layer* is the set of parameters owned by one submodule (the weight and
    bias of a :class:`~torch.nn.Linear` form one layer). Layer :math:`l` owns
    the slice ``[ptr[l], ptr[l + 1])`` of the flat vector. Floating-point
    buffers (BatchNorm running statistics) get a separate flat vector; integer
    buffers (``num_batches_tracked``) are not federated and are left out.

    Build it once with :meth:`from_module` and reuse it: grouping by layer is
    never re-derived from parameter names at call time.

    Args:
        params (list): ``(name, shape, dtype)`` of every trainable parameter,
            in the order of :meth:`torch.nn.Module.named_parameters`.
        buffers (list): ``(name, shape, dtype)`` of every floating-point buffer.
        layer_names (list of str): name of the submodule owning each layer.
        ptr (torch.Tensor): layer pointer of length ``num_layers + 1``.
    """

    def __init__(
        self,
        params: Sequence[tuple[str, Sequence[int], torch.dtype]],
        buffers: Sequence[tuple[str, Sequence[int], torch.dtype]],
        layer_names: Sequence[str],
        ptr: Tensor,
    ) -> None:
        self.params = [_Entry(n, tuple(int(s) for s in sh), dt) for n, sh, dt in params]
        self.buffers = [_Entry(n, tuple(int(s) for s in sh), dt) for n, sh, dt in buffers]
        self.layer_names = list(layer_names)
        self.ptr = ptr.to(torch.long)
        if self.ptr.numel() != len(self.layer_names) + 1:
            raise ValueError(
                f"ptr has {self.ptr.numel()} entries, expected {len(self.layer_names) + 1} "
                f"(one more than the number of layers)")
        # Sizes are read on every unflatten (each local step): computed once here.
        self._sizes = [e.numel for e in self.params]
        self._buffer_sizes = [e.numel for e in self.buffers]
        self._num_params = sum(self._sizes)
        self._num_buffers = sum(self._buffer_sizes)
        if int(self.ptr[-1]) != self.num_params:
            raise ValueError(f"ptr ends at {int(self.ptr[-1])} but the parameters "
                             f"hold {self.num_params} values")

    # ------------------------------------------------------------------ build
    @classmethod
    def from_module(cls, model: nn.Module) -> ParamLayout:
        r"""Reads names, shapes, dtypes and layer boundaries from ``model``."""
        params, layer_names, bounds = [], [], [0]
        offset, current = 0, None
        for name, p in model.named_parameters():
            owner = name.rsplit(".", 1)[0] if "." in name else ""
            if owner != current:
                if current is not None:
                    bounds.append(offset)
                layer_names.append(owner)
                current = owner
            params.append((name, tuple(p.shape), p.dtype))
            offset += p.numel()
        if not params:
            raise ValueError(f"{type(model).__name__} has no parameters to federate")
        bounds.append(offset)
        buffers = [(n, tuple(b.shape), b.dtype) for n, b in model.named_buffers()
                   if b.is_floating_point()]
        return cls(params, buffers, layer_names, torch.tensor(bounds))

    # ------------------------------------------------------------ properties
    @property
    def num_params(self) -> int:
        r"""Length :math:`D` of the flat parameter vector."""
        return self._num_params

    @property
    def num_buffers(self) -> int:
        r"""Length of the flat buffer vector (0 for models without BatchNorm)."""
        return self._num_buffers

    @property
    def num_layers(self) -> int:
        return len(self.layer_names)

    @property
    def param_names(self) -> list[str]:
        return [e.name for e in self.params]

    @property
    def buffer_names(self) -> list[str]:
        return [e.name for e in self.buffers]

    def layer_slice(self, layer: int | str) -> slice:
        r"""The slice of the flat vector owned by ``layer`` (index or module name)."""
        if isinstance(layer, str):
            if layer not in self.layer_names:
                raise KeyError(f"no layer named {layer!r}; layers are {self.layer_names}")
            layer = self.layer_names.index(layer)
        return slice(int(self.ptr[layer]), int(self.ptr[layer + 1]))

    def layer_index(self) -> Tensor:
        r"""Layer id of every flat coordinate, shape :math:`(D,)`."""
        sizes = self.ptr[1:] - self.ptr[:-1]
        return torch.repeat_interleave(torch.arange(self.num_layers), sizes)

    def select_layers(self, pattern: str | Iterable[str]) -> list[int]:
        r"""Indices of layers whose module name contains ``pattern`` (or any of
        several patterns). Used for explicit ``layers=`` selections."""
        pats = [pattern] if isinstance(pattern, str) else list(pattern)
        found = [i for i, n in enumerate(self.layer_names) if any(p in n for p in pats)]
        if not found:
            raise ValueError(f"no layer matches {pats}; layers are {self.layer_names}")
        return found

    def mask(self, layers: Iterable[int]) -> Tensor:
        r"""Boolean mask of shape :math:`(D,)` selecting the given layers."""
        m = torch.zeros(self.num_params, dtype=torch.bool)
        for layer in layers:
            m[self.layer_slice(int(layer))] = True
        return m

    # --------------------------------------------------------------- flatten
    def flatten(self, states: StateLike | Sequence[StateLike], *,
                check_finite: bool = True) -> Tensor:
        r"""Stacks the parameters of one or several models / state dicts.

        Args:
            states: a module, a state dict, or a list of them.
            check_finite (bool, optional): raise on NaN or Inf (default: ``True``).

        Returns:
            :math:`(D,)` for a single model, :math:`(N, D)` for a list.
        """
        single = isinstance(states, (nn.Module, Mapping))
        items = [states] if isinstance(states, (nn.Module, Mapping)) else list(states)
        rows = [self._flatten_one(s, self.params, "parameter", i, check_finite)
                for i, s in enumerate(items)]
        out = torch.stack(rows) if rows else torch.empty(0, self.num_params)
        return out[0] if single else out

    def flatten_buffers(self, states: StateLike | Sequence[StateLike]) -> Tensor:
        r"""Like :meth:`flatten` for floating-point buffers: :math:`(B,)` or :math:`(N, B)`."""
        single = isinstance(states, (nn.Module, Mapping))
        items = [states] if isinstance(states, (nn.Module, Mapping)) else list(states)
        rows = [self._flatten_one(s, self.buffers, "buffer", i, True)
                for i, s in enumerate(items)]
        out = torch.stack(rows) if rows else torch.empty(0, self.num_buffers)
        return out[0] if single else out

    def _flatten_one(self, state: StateLike, entries: list[_Entry], kind: str,
                     index: int, check_finite: bool) -> Tensor:
        if isinstance(state, nn.Module):
            state = state.state_dict()
        missing = [e.name for e in entries if e.name not in state]
        if missing:
            raise KeyError(f"client {index}: {kind}s {missing} are missing "
                           f"(the layout expects {[e.name for e in entries]})")
        parts = []
        for e in entries:
            t = state[e.name]
            if tuple(t.shape) != e.shape:
                raise ValueError(f"client {index}: {kind} {e.name!r} has shape "
                                 f"{tuple(t.shape)}, the layout expects {e.shape}")
            t = t.detach().reshape(-1).to(torch.get_default_dtype())
            parts.append(t)
        flat = torch.cat(parts) if parts else torch.empty(0)
        if check_finite and not torch.isfinite(flat).all():
            bad = [e.name for e, t in zip(entries, parts, strict=True)
                   if not torch.isfinite(t).all()]
            raise ValueError(f"client {index}: non-finite values in {kind}s {bad}")
        return flat

    # ------------------------------------------------------------- unflatten
    def unflatten(self, flat: Tensor) -> OrderedDict[str, Tensor]:
        r"""Views of a flat :math:`(D,)` vector (or :math:`(N, D)` matrix) as
        named tensors of shape ``shape`` (or ``(N, *shape)``). Differentiable,
        and safe under :func:`torch.vmap`."""
        return self._unflatten(flat, self.params, self._sizes, self._num_params, "parameter")

    def unflatten_buffers(self, flat: Tensor) -> OrderedDict[str, Tensor]:
        r"""Named views of a flat buffer vector, see :meth:`unflatten`."""
        return self._unflatten(flat, self.buffers, self._buffer_sizes,
                               self._num_buffers, "buffer")

    @staticmethod
    def _unflatten(flat: Tensor, entries: list[_Entry], sizes: list[int], total: int,
                   kind: str) -> OrderedDict[str, Tensor]:
        if flat.shape[-1] != total:
            raise ValueError(f"flat {kind} vector has {flat.shape[-1]} values, "
                             f"the model has {total}")
        lead = flat.shape[:-1]
        # One split into views: its backward is one concatenation.
        return OrderedDict(
            (e.name, piece.reshape(*lead, *e.shape).to(e.dtype))
            for e, piece in zip(entries, flat.split(sizes, dim=-1), strict=True))

    def state_dict_of(self, params: Tensor, buffers: Tensor | None = None
                      ) -> OrderedDict[str, Tensor]:
        r"""A loadable state dict (copies) from flat parameters and buffers."""
        out = OrderedDict((k, v.detach().clone()) for k, v in self.unflatten(params).items())
        if buffers is not None:
            out.update((k, v.detach().clone()) for k, v in self.unflatten_buffers(buffers).items())
        return out

    def load_into(self, model: nn.Module, params: Tensor,
                  buffers: Tensor | None = None) -> nn.Module:
        r"""Copies flat parameters (and buffers) into ``model`` in place."""
        model.load_state_dict(self.state_dict_of(params, buffers), strict=False)
        return model

    # ------------------------------------------------------------------ misc
    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ParamLayout) and self.params == other.params
                and self.buffers == other.buffers and torch.equal(self.ptr, other.ptr))

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(num_params={self.num_params}, "
                f"num_layers={self.num_layers}, num_buffers={self.num_buffers})")

