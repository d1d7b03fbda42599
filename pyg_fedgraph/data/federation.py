"""The federation as a PyG graph: node i is client i."""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.data import Data

from pyg_fedgraph.data.layout import ParamLayout, StateLike

__all__ = ["FederationGraph", "ClientTable"]

_VERSIONS = itertools.count(1)


class FederationGraph(Data):
    r"""A federation of :math:`N` clients as a graph.

    Node :math:`i` is client :math:`i`. Node attributes:

    * ``x``: flat model parameters :math:`\theta_i`, shape :math:`(N, D)`;
    * ``delta``: the change of the last local training
      :math:`\theta_i^{after} - \theta_i^{before}`, shape :math:`(N, D)`;
    * ``num_samples``: training samples per client :math:`n_i`, shape :math:`(N,)`;
    * ``client_id``: global id of each node's client, shape :math:`(N,)`
      (nodes can be a sampled subset of the federation);
    * ``layer_ptr``: layer pointer of the flat vector, shape :math:`(L + 1,)`
      (named ``layer_ptr`` because PyG's batching reserves ``ptr``).

    Optional edges ``edge_index`` :math:`(2, E)` / ``edge_weight`` :math:`(E,)`
    carry a prior client relation graph (road sensors linked by distance).

    Args:
        x (torch.Tensor): flat parameters :math:`(N, D)`.
        delta (torch.Tensor, optional): last updates :math:`(N, D)`.
        num_samples (torch.Tensor, optional): samples per client; defaults to ones.
        client_id (torch.Tensor, optional): defaults to ``arange(N)``.
        layer_ptr (torch.Tensor, optional): defaults to one layer spanning all of D.
        edge_index, edge_weight (torch.Tensor, optional): prior graph.
        layout (ParamLayout, optional): the model layout (kept as metadata).
    """

    def __init__(self, x: Tensor | None = None, delta: Tensor | None = None,
                 num_samples: Tensor | None = None, client_id: Tensor | None = None,
                 layer_ptr: Tensor | None = None, edge_index: Tensor | None = None,
                 edge_weight: Tensor | None = None, layout: ParamLayout | None = None,
                 **kwargs: Any) -> None:
        if x is not None:
            if x.dim() != 2:
                raise ValueError(f"x must be (num_clients, num_params), got shape {tuple(x.shape)}")
            n, d = x.shape
            if delta is not None and tuple(delta.shape) != (n, d):
                raise ValueError(f"delta has shape {tuple(delta.shape)}, x has {(n, d)}")
            if num_samples is None:
                num_samples = torch.ones(n, dtype=torch.long)
            if num_samples.numel() != n:
                raise ValueError(f"num_samples has {num_samples.numel()} entries for {n} clients")
            if client_id is None:
                client_id = torch.arange(n)
            if client_id.numel() != n:
                raise ValueError(f"client_id has {client_id.numel()} entries for {n} clients")
            if layer_ptr is None:
                layer_ptr = layout.ptr if layout is not None else torch.tensor([0, d])
            if int(layer_ptr[-1]) != d:
                raise ValueError(f"layer_ptr ends at {int(layer_ptr[-1])}, x has {d} columns")
            if edge_index is not None and edge_index.numel() > 0 and int(edge_index.max()) >= n:
                raise ValueError(f"edge_index refers to node {int(edge_index.max())}, "
                                 f"the graph has {n} clients")
            if (edge_weight is not None and edge_index is not None
                    and edge_weight.size(0) != edge_index.size(1)):
                raise ValueError(f"edge_weight has {edge_weight.size(0)} entries for "
                                 f"{edge_index.size(1)} edges")
        super().__init__(x=x, delta=delta, num_samples=num_samples, client_id=client_id,
                         layer_ptr=layer_ptr, edge_index=edge_index,
                         edge_weight=edge_weight, **kwargs)
        if layout is not None:
            self.layout = layout

    @classmethod
    def from_models(cls, models: Sequence[StateLike], layout: ParamLayout | None = None,
                    **kwargs: Any) -> FederationGraph:
        r"""Builds the graph from a list of models or state dicts.

        ``layout`` defaults to the layout of the first model (which must then be
        an :class:`~torch.nn.Module`)."""
        if not models:
            raise ValueError("from_models needs at least one model")
        if layout is None:
            if not isinstance(models[0], nn.Module):
                raise ValueError("pass layout= when building from state dicts")
            layout = ParamLayout.from_module(models[0])
        return cls(x=layout.flatten(list(models)), layout=layout, **kwargs)

    @property
    def num_clients(self) -> int:
        return int(self.x.size(0))

    @property
    def num_params(self) -> int:
        return int(self.x.size(1))

    @property
    def num_layers(self) -> int:
        return int(self.layer_ptr.numel() - 1)

    @property
    def sample_share(self) -> Tensor:
        r""":math:`p_i = n_i / \sum_j n_j`, shape :math:`(N,)`
        (:func:`~pyg_fedgraph.nn.functional.sample_shares`)."""
        from pyg_fedgraph.nn.functional import sample_shares
        return sample_shares(self.num_samples, self.x.dtype)

    def __inc__(self, key: str, value: Any, *args: Any, **kwargs: Any) -> Any:
        if key == "layer_ptr":
            return 0
        return super().__inc__(key, value, *args, **kwargs)

    def __cat_dim__(self, key: str, value: Any, *args: Any, **kwargs: Any) -> Any:
        if key == "layer_ptr":
            return None
        return super().__cat_dim__(key, value, *args, **kwargs)


class ClientTable:
    r"""The server's table of a federation: every client's latest accepted
    model and whether it has ever trained.

    The round engine owns it and writes the accepted uploads of a round after
    the strategy's :meth:`~pyg_fedgraph.strategies.Strategy.aggregate_train`
    has seen them (so during aggregation the table still holds the previous
    round's models, and the round's uploads are ``graph.x``). Strategies read
    it through :attr:`FederationContext.clients
    <pyg_fedgraph.strategies.FederationContext>` instead of keeping copies.

    Like :meth:`torch.nn.Module.state_dict`, :meth:`state_dict` shares
    storage with the table, whose rows are updated in place: a consumer that
    keeps a snapshot copies it (the orchestrators' ``state_dict()`` do).

    Args:
        init_params (torch.Tensor): the common initial model :math:`(D,)`.
        num_clients (int): :math:`N`.

    Shapes:
        - **params:** :math:`(N, D)`; **trained:** :math:`(N,)` bool.
    """

    def __init__(self, init_params: Tensor, num_clients: int) -> None:
        if init_params.dim() != 1:
            raise ValueError(f"init_params must be one flat model (D,), got shape "
                             f"{tuple(init_params.shape)}")
        self.params = init_params.detach().unsqueeze(0).repeat(num_clients, 1)
        self.trained = torch.zeros(num_clients, dtype=torch.bool, device=init_params.device)
        self.version = 0
        self._touch()

    def _touch(self) -> None:
        #: A token that changes whenever the table does (unique in the process),
        #: for caches of values derived from it.
        self.version = next(_VERSIONS)

    @property
    def num_clients(self) -> int:
        return int(self.params.size(0))

    def update(self, clients: Tensor, params: Tensor) -> None:
        r"""Writes the accepted uploads ``params`` :math:`(S, D)` of
        ``clients`` :math:`(S,)` in place."""
        if clients.numel():
            self.params[clients] = params.detach().to(self.params.dtype)
            self.trained[clients] = True
        self._touch()

    def grow(self, init_params: Tensor) -> None:
        r"""Adds clients that join, holding ``init_params`` :math:`(k, D)`."""
        self.params = torch.cat([self.params, init_params.detach().to(self.params)])
        self.trained = torch.cat([self.trained, self.trained.new_zeros(init_params.size(0))])
        self._touch()

    def state_dict(self) -> dict[str, Any]:
        return {"params": self.params, "trained": self.trained}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if tuple(state["params"].shape) != tuple(self.params.shape):
            raise ValueError(f"the saved client table holds {tuple(state['params'].shape)} "
                             f"models, this federation has {tuple(self.params.shape)}")
        self.params = state["params"].detach().clone().to(self.params)
        self.trained = state["trained"].detach().clone().to(self.trained)
        self._touch()

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(clients={self.num_clients}, "
                f"params={self.params.size(1)}, trained={int(self.trained.sum())})")
