r"""Functional embeddings of client models: their mean output on a fixed
random input that the server and every client can build from one seed
(FED-PUB's proxy graph).

FED-PUB (Baek et al., `"Personalized Subgraph Federated Learning"
<https://arxiv.org/abs/2206.10206>`_, ICML 2023, Sec. 4) compares clients by
what their models compute rather than by their parameters: the server keeps
one random graph with random node features, every client runs its GNN on it
and returns the mean of the node embeddings, and the server compares these
vectors by cosine similarity. Facts from the released code
(``JinheonBaek/FED-PUB``, commit ``302980d``, ``models/fedpub/server.py``,
``get_proxy_data``; ``models/fedpub/client.py``, ``get_functional_embedding``;
``models/nets.py``, ``is_proxy``; ``parser.py``):

* the graph: :func:`networkx.random_partition_graph` of ``n_proxy = 5``
  blocks of 100 nodes, :math:`p_{in} = 0.1`, :math:`p_{out} = 0`, seeded by
  the run's seed; node features :math:`\mathcal{N}(0, 1)` of the data's
  width, from torch's global generator;
* the embedding: the output of the last GCN layer *before* its ReLU, in
  evaluation mode (no dropout, masks pruned), averaged over the proxy's
  nodes; computed on the model after the round's local training.

Here the proxy is a function of ``(seed, sizes, p_in, width)``
(:func:`proxy_graph`), built by each client instead of being sent: the same
graph FED-PUB's server would send, without sending it (500 x 1,433 floats on
Cora, more than the model). Clients that hold sets of graphs get the same
blocks as a batch of ``num_graphs`` graphs; clients whose data are not
graphs get :math:`\mathcal{N}(0, 1)` inputs of their input shape instead
(:func:`proxy_inputs`).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from pyg_fedgraph.data.federated_dataset import FederatedDataset
from pyg_fedgraph.data.graph_dataset import gcn_edge_weight
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.utils.graph import random_partition_graph
from pyg_fedgraph.utils.seeds import make_generator

__all__ = ["proxy_graph", "proxy_inputs", "functional_embeddings"]


def proxy_graph(num_features: int, num_graphs: int = 5, nodes_per_graph: int = 100,
                p_in: float = 0.1, seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    r"""FED-PUB's proxy graph: ``num_graphs`` random graphs of
    ``nodes_per_graph`` nodes (:func:`~pyg_fedgraph.utils.graph.random_partition_graph`
    with :math:`p_{out} = 0`) and :math:`\mathcal{N}(0, 1)` node features
    of width ``num_features``, drawn from
    :func:`~pyg_fedgraph.utils.seeds.make_generator` ``(seed, "proxy-graph",
    k)`` (:math:`k = 0` edges, :math:`1` features), with a self loop on every
    node and GCN's edge weights (:func:`~pyg_fedgraph.data.gcn_edge_weight`),
    as the federation's graphs.

    Returns:
        ``(x, edge_index, edge_weight)`` of shapes :math:`(P, F)`,
        :math:`(2, E)`, :math:`(E,)`, :math:`P` = ``num_graphs *
        nodes_per_graph``.
    """
    if num_graphs < 1 or nodes_per_graph < 1:
        raise ValueError(f"a proxy graph needs num_graphs >= 1 and nodes_per_graph >= 1, got "
                         f"{num_graphs} and {nodes_per_graph}")
    n = num_graphs * nodes_per_graph
    edge_index = random_partition_graph([nodes_per_graph] * num_graphs, p_in,
                                        generator=make_generator(seed, "proxy-graph", 0))
    x = torch.randn(n, num_features, generator=make_generator(seed, "proxy-graph", 1))
    edge_index, edge_weight = gcn_edge_weight(edge_index, n)
    return x, edge_index, edge_weight


def proxy_inputs(dataset: FederatedDataset, num_graphs: int = 5, nodes_per_graph: int = 100,
                 p_in: float = 0.1, seed: int = 0) -> tuple[Tensor, ...]:
    r"""The model inputs of the proxy for ``dataset``'s clients, on its
    device: for clients that hold graphs (``input_kind == "graph"``) the
    :func:`proxy_graph` of their feature width, as ``(x, edge_index,
    edge_weight)``; for clients that hold sets of graphs (``input_kind ==
    "graph-set"``) its blocks as a batch of ``num_graphs`` graphs, ``(x,
    edge_index, batch, graph_size)``, with the same node features and the
    edges without self loops (graph classifiers add their own); otherwise
    ``num_graphs * nodes_per_graph`` samples of :math:`\mathcal{N}(0, 1)`
    values of the input shape, as ``(x,)``."""
    if dataset.input_kind == "graph-set":
        if len(dataset.input_shape) != 1:
            raise ValueError(f"graph-set clients need node features of shape (F,), got "
                             f"{dataset.input_shape}")
        x, edge_index, _ = proxy_graph(dataset.input_shape[0], num_graphs, nodes_per_graph,
                                       p_in, seed)
        edge_index = edge_index[:, edge_index[0] != edge_index[1]]
        batch = torch.arange(num_graphs).repeat_interleave(nodes_per_graph)
        size = torch.full((num_graphs,), nodes_per_graph)
        return tuple(t.to(dataset.device) for t in (x, edge_index, batch, size))
    if dataset.input_kind == "graph":
        if len(dataset.input_shape) != 1:
            raise ValueError(f"graph clients need node features of shape (F,), got "
                             f"{dataset.input_shape}")
        graph = proxy_graph(dataset.input_shape[0], num_graphs, nodes_per_graph, p_in, seed)
        return tuple(t.to(dataset.device) for t in graph)
    x = torch.randn(num_graphs * nodes_per_graph, *dataset.input_shape,
                    generator=make_generator(seed, "proxy-graph", 1))
    return (x.to(dataset.device),)


class _Embedder(nn.Module):
    r"""Calls the wrapped model's ``embed`` (or, without one, the model)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *inputs: Tensor) -> Tensor:
        embed = getattr(self.model, "embed", None)
        return embed(*inputs) if callable(embed) else self.model(*inputs)


def functional_embeddings(model: nn.Module, layout: ParamLayout, params: Tensor,
                          buffers: Tensor, inputs: tuple[Tensor, ...], *,
                          batched: bool = True) -> Tensor:
    r"""Functional embeddings of :math:`S` clients' models,

    .. math::
        \mathbf{h}_i = \frac{1}{P} \sum_{v=1}^{P} f_v(\tilde{X};\, \theta_i),

    :math:`f(\cdot;\, \theta_i)` the model's ``embed`` method with the
    client's flat parameters (its output when it has none), :math:`\tilde{X}`
    the proxy ``inputs``, in evaluation mode (no dropout; FED-PUB's masks
    pruned). One :func:`torch.vmap` over the clients (``batched``) or a
    loop; no gradient.

    Args:
        model (torch.nn.Module): the client architecture.
        layout (ParamLayout): its flat layout.
        params (torch.Tensor): flat parameters :math:`(S, D)`.
        buffers (torch.Tensor): flat buffers :math:`(S, B)`.
        inputs (tuple of torch.Tensor): the proxy, the model's positional
            inputs, the same for every client.

    Shapes:
        - **output:** :math:`(S, H)`.
    """
    wrapper = _Embedder(model)
    was_training = model.training
    model.eval()

    def one(theta: Tensor, flat_buffers: Tensor) -> Tensor:
        named = {f"model.{k}": v for k, v in layout.unflatten(theta).items()}
        if layout.num_buffers:
            named.update({f"model.{k}": v
                          for k, v in layout.unflatten_buffers(flat_buffers).items()})
        out = functional_call(wrapper, named, inputs)
        return out.reshape(out.size(0), -1).mean(dim=0)

    try:
        with torch.no_grad():
            if batched:
                return vmap(one)(params, buffers)
            return torch.stack([one(params[i], buffers[i]) for i in range(params.size(0))])
    finally:
        model.train(was_training)
