"""Builds a reference client model by name from a dataset's input shape."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from pyg_fedgraph.hparams import HParam, schema
from pyg_fedgraph.models.cnn import CNNBN, SimpleCNN
from pyg_fedgraph.models.gnn import GAT, GCN, GraphSAGE, MaskedGCN
from pyg_fedgraph.models.graph_classifiers import GIN, GCNPool
from pyg_fedgraph.models.gru import GRUForecaster
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.models.seq2seq import GRUSeq2Seq
from pyg_fedgraph.utils.registry import Registry

__all__ = ["MODELS", "ModelSpec", "register_model", "build_model",
           "model_options"]


@dataclass(frozen=True)
class ModelSpec:
    r"""A registered client model: its class (whose constructor declares the
    options, ``--set model.<arg>``) and the builder that sizes it for a
    dataset, ``build(input_shape, num_outputs, **options) -> nn.Module``.

    Args:
        cls (type): the :class:`torch.nn.Module` subclass.
        build (callable): the builder.
        derived (tuple of str): constructor arguments the builder derives
            from the dataset, which are therefore not options.
        inputs (str): what the model takes: ``"tensor"`` (a batch of
            samples), ``"graph"`` (a client's graph and the nodes to
            predict) or ``"graph-set"`` (a batch of a client's graphs to
            classify); it must match the data set's
            :attr:`~pyg_fedgraph.data.FederatedDataset.input_kind`.
    """
    cls: type[nn.Module]
    build: Callable[..., nn.Module]
    derived: tuple[str, ...] = ("in_channels", "out_channels", "num_classes", "out_steps")
    inputs: str = "tensor"


#: Name -> :class:`ModelSpec` of every reference client model.
MODELS: Registry[ModelSpec] = Registry("model", normalize=str.lower)


def register_model(name: str, cls: type[nn.Module], *, inputs: str = "tensor"
                   ) -> Callable[[Callable[..., nn.Module]], Callable[..., nn.Module]]:
    r"""Decorator registering a builder ``build(input_shape, num_outputs,
    **options)`` of model class ``cls`` under ``name`` (``inputs``: see
    :class:`ModelSpec`)."""
    def wrap(build: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        MODELS.register(name)(ModelSpec(cls, build, inputs=inputs))
        return build
    return wrap


@register_model("mlp", MLP)
def _build_mlp(shape: tuple[int, ...], num_outputs: int, **kwargs: Any) -> nn.Module:
    # Panacea's client MLP has hidden width 16 (Sec. IV-A).
    kwargs.setdefault("hidden_channels", 16)
    return MLP(math.prod(shape), out_channels=num_outputs, **kwargs)


def _image_dims(shape: tuple[int, ...], kwargs: dict[str, Any]) -> tuple[int, tuple[int, int]]:
    r"""``(in_channels, (H, W))`` from a per-sample shape ``(C, H, W)``,
    ``(H, W)`` or flat ``(F,)`` (the latter with ``image_size=`` or square)."""
    image_size = kwargs.pop("image_size", None)
    if len(shape) in (2, 3):
        if image_size is not None:
            raise ValueError(f"image_size is read from the input shape {shape}; pass it "
                             f"only for flat (F,) inputs")
        return (1 if len(shape) == 2 else shape[0]), (shape[-2], shape[-1])
    if len(shape) != 1:
        raise ValueError(f"an image model needs inputs of shape (C, H, W), (H, W) or a "
                         f"flat (F,), got {shape}")
    num_features = shape[0]
    if image_size is None:
        side = math.isqrt(num_features)
        if side * side != num_features:
            raise ValueError(f"cannot read an image from {num_features} flat features: "
                             f"pass image_size=(H, W) (channels are then F / (H * W))")
        return 1, (side, side)
    h, w = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    if num_features % (h * w) != 0:
        raise ValueError(f"{num_features} flat features are not a whole number of "
                         f"{h}x{w} images; check image_size")
    return num_features // (h * w), (h, w)


@register_model("cnn", SimpleCNN)
def _build_cnn(shape: tuple[int, ...], num_outputs: int, **kwargs: Any) -> nn.Module:
    in_channels, image_size = _image_dims(shape, kwargs)
    return SimpleCNN(in_channels, num_outputs, image_size, **kwargs)


@register_model("cnn-bn", CNNBN)
def _build_cnn_bn(shape: tuple[int, ...], num_outputs: int, **kwargs: Any) -> nn.Module:
    in_channels, image_size = _image_dims(shape, kwargs)
    return CNNBN(in_channels, num_outputs, image_size, **kwargs)


@register_model("gru", GRUForecaster)
def _build_gru(shape: tuple[int, ...], num_outputs: int, **kwargs: Any) -> nn.Module:
    if len(shape) != 2:
        raise ValueError(f"the 'gru' model needs sequences of shape (T, C) per sample, "
                         f"got {shape}")
    return GRUForecaster(in_channels=shape[1], out_steps=num_outputs, **kwargs)


@register_model("gru-seq2seq", GRUSeq2Seq)
def _build_gru_seq2seq(shape: tuple[int, ...], num_outputs: int, **kwargs: Any) -> nn.Module:
    if len(shape) != 2:
        raise ValueError(f"the 'gru-seq2seq' model needs sequences of shape (T, C) per "
                         f"sample, got {shape}")
    return GRUSeq2Seq(in_channels=shape[1], out_steps=num_outputs, **kwargs)


def _node_features(name: str, shape: tuple[int, ...]) -> int:
    if len(shape) != 1:
        raise ValueError(f"the {name!r} model needs node features of shape (F,), got {shape}")
    return shape[0]


@register_model("gcn", GCN, inputs="graph")
def _build_gcn(shape: tuple[int, ...], num_outputs: int, **kwargs: Any) -> nn.Module:
    return GCN(_node_features("gcn", shape), num_outputs, **kwargs)


@register_model("sage", GraphSAGE, inputs="graph")
def _build_sage(shape: tuple[int, ...], num_outputs: int, **kwargs: Any) -> nn.Module:
    return GraphSAGE(_node_features("sage", shape), num_outputs, **kwargs)


@register_model("gat", GAT, inputs="graph")
def _build_gat(shape: tuple[int, ...], num_outputs: int, **kwargs: Any) -> nn.Module:
    return GAT(_node_features("gat", shape), num_outputs, **kwargs)


@register_model("gin", GIN, inputs="graph-set")
def _build_gin(shape: tuple[int, ...], num_outputs: int, **kwargs: Any) -> nn.Module:
    return GIN(_node_features("gin", shape), num_outputs, **kwargs)


@register_model("gcn-pool", GCNPool, inputs="graph-set")
def _build_gcn_pool(shape: tuple[int, ...], num_outputs: int, **kwargs: Any) -> nn.Module:
    return GCNPool(_node_features("gcn-pool", shape), num_outputs, **kwargs)


@register_model("masked-gcn", MaskedGCN, inputs="graph")
def _build_masked_gcn(shape: tuple[int, ...], num_outputs: int, **kwargs: Any) -> nn.Module:
    return MaskedGCN(_node_features("masked-gcn", shape), num_outputs, **kwargs)


def model_options(name: str) -> dict[str, HParam]:
    r"""The options a user may pass to model ``name`` (``--set model.<arg>``):
    its constructor's declared parameters, less those :func:`build_model`
    derives from the dataset; ``image_size`` for the image models."""
    key = name.lower()
    spec = MODELS[key]
    return {k: hp for k, hp in schema(spec.cls).items()
            if k not in spec.derived and not (k == "image_size" and key not in ("cnn", "cnn-bn"))}


def build_model(name: str, dataset_input_shape: Sequence[int], num_outputs: int,
                **kwargs: Any) -> nn.Module:
    r"""Builds a reference client model sized for a dataset.

    ======== ======================= ===========================================
    name     model                   ``dataset_input_shape`` (one sample)
    ======== ======================= ===========================================
    mlp      :class:`MLP`            any; flattened (``hidden_channels=16``
                                     unless given)
    cnn      :class:`SimpleCNN`      :math:`(C, H, W)`, :math:`(H, W)`, or flat
                                     :math:`(F,)` (square one-channel image,
                                     or pass ``image_size=``)
    cnn-bn   :class:`CNNBN`          as for ``cnn``
    gru      :class:`GRUForecaster`  :math:`(T, C)`
    gru-     :class:`GRUSeq2Seq`     :math:`(T, C)` (Panacea's and CNFGNN's
    seq2seq                          traffic model)
    gcn      :class:`GCN`            a client's graph, node features
                                     :math:`(F,)`
    masked-  :class:`MaskedGCN`      as for ``gcn`` (FED-PUB's client: masks
    gcn                              kept on the client)
    sage     :class:`GraphSAGE`      as for ``gcn``
    gat      :class:`GAT`            as for ``gcn``
    gin      :class:`GIN`            a batch of a client's graphs, node
                                     features :math:`(F,)`
    gcn-pool :class:`GCNPool`        as for ``gin``
    ======== ======================= ===========================================

    Args:
        name (str): a name of :data:`MODELS` (case-insensitive).
        dataset_input_shape (tuple of int): shape of one input sample, e.g.
            :obj:`FederatedDataset.input_shape`.
        num_outputs (int): number of classes, regression targets or
            forecast steps.
        **kwargs (optional): further constructor arguments of the model
            (e.g. ``hidden_channels``, ``num_layers``, ``channels``).
    """
    spec = MODELS[name]
    shape = tuple(int(s) for s in dataset_input_shape)
    if num_outputs < 1:
        raise ValueError(f"num_outputs must be positive, got {num_outputs}")
    return spec.build(shape, num_outputs, **kwargs)
