"""Panacea (graph hypernetwork) and pFedHN (MLP hypernetwork)."""
from __future__ import annotations

import logging
import random
from dataclasses import replace
from typing import Annotated, Literal

import torch
from torch import Tensor
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import negative_sampling, to_dense_adj

from pyg_fedgraph.data.federation import FederationGraph
from pyg_fedgraph.hparams import Range, Search
from pyg_fedgraph.nn.hypernetwork import GCNHypernetwork, hypernetwork_update
from pyg_fedgraph.strategies.base import (
    FederationContext,
    ServerOptimizerState,
    Strategy,
    TrainPlan,
)
from pyg_fedgraph.strategies.registry import register_strategy
from pyg_fedgraph.train.config import LocalConfig
from pyg_fedgraph.utils.seeds import derive_seed

__all__ = ["Panacea", "PFedHN"]

log = logging.getLogger(__name__)

OptimizerName = Literal["sgd", "adam"]
Positive = Annotated[int, Range(ge=1)]
NonNegative = Annotated[float, Range(ge=0.0)]
#: Hypernetwork learning rate; Panacea's grid {0.001, ..., 0.1} (Sec. IV-A).
HypernetworkLR = Annotated[float, Range(gt=0.0), Search(1e-3, 1e-1, log=True)]


@register_strategy("panacea")
class Panacea(ServerOptimizerState, Strategy):
    r"""The Panacea server from the `"Graph-Relational Federated Learning:
    Enhanced Personalization and Robustness"` paper (Lin et al., Algorithm 1).

    The server owns a :class:`~pyg_fedgraph.nn.GCNHypernetwork`
    :math:`\theta_t = M(E(\mathbf{h}^{(0)}, \mathbf{A}; \psi_e)_t; \psi_m)`
    over the prior client graph :math:`\mathbf{A}`. Each round the sampled
    clients start from their generated models :math:`\theta_t`, run local SGD
    and return :math:`\Delta\theta_t`; the server then takes :math:`K_s`
    optimizer steps on

    .. math::
        \mathcal{L}(\psi) = \frac{1}{2S} \sum_{t \in S_r}
        \big\lVert \theta_t(\psi) - \mathrm{sg}\big(\theta_t^{(0)} +
        \Delta\theta_t\big) \big\rVert^2
        + \lambda_d\, \mathcal{L}_d(\psi_e),

    the mean squared error between the generated models and the clients'
    trained models (Sec. III) plus the graph reconstruction loss
    :math:`\mathcal{L}_d` of Eq. (5); :math:`\theta_t^{(0)}` is the model
    client :math:`t` started from and :math:`\mathrm{sg}` stops the gradient.
    Its first step is Algorithm 1's update (lines 12-13). Why the regression
    form, the sampling, novel clients and the optimizer:
    :doc:`/methods/panacea`.

    Args:
        embedding_dim (int, optional): client embedding size (paper: 100);
            :obj:`None` uses :math:`1 + \lfloor N/4 \rfloor` (pFedHN's code)
            (default: :obj:`100`)
        hidden_channels (int, optional): encoder and head width (paper: 100)
            (default: :obj:`100`)
        num_gnn_layers (int, optional): encoder layers (paper: 3)
            (default: :obj:`3`)
        num_mlp_layers (int, optional): head layers (paper: 3)
            (default: :obj:`3`)
        encoder (str, optional): ``"gcn"`` (Panacea) or ``"mlp"``
            (Panacea-MLP, the graph is not used by the encoder)
            (default: :obj:`"gcn"`)
        graph_generator (bool, optional): add :math:`\lambda_d \mathcal{L}_d`
            (:obj:`False` is the ablation Panacea-GN) (default: :obj:`True`)
        lambda_d (float, optional): weight :math:`\lambda_d` of the
            reconstruction loss (paper grid :math:`\{0.001, \ldots, 1\}`)
            (default: :obj:`0.1`)
        hn_lr (float, optional): learning rate :math:`\alpha` of the
            hypernetwork (paper grid :math:`\{0.001, \ldots, 0.1\}`)
            (default: :obj:`0.001`)
        optimizer (str, optional): ``"adam"`` or ``"sgd"`` (momentum 0.9)
            (default: :obj:`"adam"`)
        hn_weight_decay (float, optional): weight decay of the hypernetwork's
            weights, not of the embeddings (default: :obj:`0.0`)
        server_steps (int, optional): server steps :math:`K_s` per round
            (paper: 10) (default: :obj:`10`)
        local_steps (int, optional): if set, every client runs this many
            local SGD steps :math:`K_c` (paper: 50) instead of the run's
            epochs (default: :obj:`None`)
        max_grad_norm (float, optional): clip the hypernetwork gradient norm
            (default: :obj:`None`)
        chunk_size (int, optional): generate the model in chunks of this size
            (default: :obj:`None`)
        client_reduction (str, optional): ``"mean"`` or ``"sum"`` of the
            sampled clients' gradients (default: :obj:`"mean"`)

    Shapes:
        - **state:** the hypernetwork (client embeddings :math:`(N, 100)`,
          held-out mask :math:`(N)`, encoder, head, generator) and its
          optimizer (negative sampling draws from the stream
          ``(seed, "negative-sampling", round, step)``: no state).
        - **output:** generated models :math:`(S, D)`.

    Example:
        >>> from pyg_fedgraph.experiment import ExperimentConfig, build_simulator
        >>> cfg = ExperimentConfig(dataset="fl60", strategy="panacea", rounds=3,
        ...                        overrides={"lambda_d": 0.01})
        >>> history = build_simulator(cfg).run()
    """
    needs_prior_graph = True
    # Studies search lambda_d, hn_lr and embedding_dim (the paper's grids,
    # Sec. IV-A) and the local learning rate.
    search_local = ("lr",)

    def __init__(self,
                 embedding_dim: Annotated[int | None, Range(ge=1),
                                          Search(choices=(25, 50, 100))] = 100,
                 hidden_channels: Positive = 100, num_gnn_layers: Positive = 3,
                 num_mlp_layers: Positive = 3, encoder: Literal["gcn", "mlp"] = "gcn",
                 graph_generator: bool = True,
                 lambda_d: Annotated[float, Range(ge=0.0), Search(1e-3, 1.0, log=True)] = 0.1,
                 hn_lr: HypernetworkLR = 1e-3, optimizer: OptimizerName = "adam",
                 hn_weight_decay: NonNegative = 0.0, server_steps: Positive = 10,
                 local_steps: Annotated[int | None, Range(ge=1)] = None,
                 max_grad_norm: Annotated[float | None, Range(gt=0.0)] = None,
                 chunk_size: Annotated[int | None, Range(ge=1)] = None,
                 client_reduction: Literal["mean", "sum"] = "mean") -> None:
        super().__init__()
        self.embedding_dim = embedding_dim
        self.hidden_channels = hidden_channels
        self.num_gnn_layers = num_gnn_layers
        self.num_mlp_layers = num_mlp_layers
        self.encoder = encoder
        self.graph_generator = graph_generator
        self.lambda_d = lambda_d
        self.hn_lr = hn_lr
        self.optimizer = optimizer
        self.hn_weight_decay = hn_weight_decay
        self.server_steps = server_steps
        self.local_steps = local_steps
        self.max_grad_norm = max_grad_norm
        self.chunk_size = chunk_size
        self.client_reduction = client_reduction
        # The GCN encoder and the graph generator read the prior graph.
        self.needs_prior_graph = encoder == "gcn" or graph_generator  # type: ignore[misc]  # ClassVar set per instance
        self.hypernetwork: GCNHypernetwork | None = None
        self.server_optimizer: torch.optim.Optimizer | None = None
        self._local: LocalConfig | None = None

    def default_sample_fraction(self, num_clients: int) -> float:
        # The paper selects 5 clients at random each round (experimental setup).
        return min(1.0, 5.0 / num_clients)

    def setup(self, ctx: FederationContext) -> None:
        super().setup(ctx)
        if (self.graph_generator and ctx.edge_index is not None
                and ctx.edge_index.size(1) == 0):
            raise ValueError(f"strategy {self.name!r}: the graph generator reconstructs the "
                             f"prior graph, which has no edges; pass graph_generator=False")
        # The hypernetwork's initialization comes from the run's seed, not
        # from whatever the global random state holds.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(ctx.seed, "hypernetwork-init"))
            self.hypernetwork = GCNHypernetwork(
                ctx.num_clients, ctx.layout.num_params,
                embedding_dim=(self.embedding_dim if self.embedding_dim is not None
                               else 1 + ctx.num_clients // 4),
                hidden_channels=self.hidden_channels, num_gnn_layers=self.num_gnn_layers,
                num_mlp_layers=self.num_mlp_layers, encoder=self.encoder,
                graph_generator=self.graph_generator,
                chunk_size=self.chunk_size).to(ctx.init_params.device)
        if ctx.held_out.numel() > 0:
            self.hypernetwork.set_held_out(ctx.held_out)
        self.server_optimizer = self._make_optimizer(self.hypernetwork)
        self._local = None
        if self.local_steps is not None:
            self._local = replace(ctx.local, steps=self.local_steps)

    def _make_optimizer(self, hn: GCNHypernetwork) -> torch.optim.Optimizer:
        # Embeddings get no weight decay: held-out rows must keep their value.
        weights = [p for n, p in hn.named_parameters() if n != "embedding"]
        groups = [{"params": weights, "weight_decay": self.hn_weight_decay},
                  {"params": [hn.embedding], "weight_decay": 0.0}]
        if self.optimizer == "sgd":
            return torch.optim.SGD(groups, lr=self.hn_lr, momentum=0.9)
        return torch.optim.Adam(groups, lr=self.hn_lr)

    # ------------------------------------------------------------- rounds
    def configure_train(self, rnd: int, clients: Tensor) -> TrainPlan:
        hn = self._require_hypernetwork()
        with torch.no_grad():
            params = self._generate(hn, clients.to(torch.long))
        return TrainPlan(params=params, config=self._local)

    def aggregate_train(self, rnd: int, graph: FederationGraph) -> None:
        hn = self._require_hypernetwork()
        assert self.server_optimizer is not None  # setup() creates it with the hypernetwork
        if graph.num_clients == 0:
            return
        clients = graph.client_id.to(torch.long)
        delta = graph.delta.detach()
        scale = 1.0 / graph.num_clients if self.client_reduction == "mean" else 1.0
        target: Tensor | None = None
        # K_s optimizer steps on one loss: a loop over steps, not over clients.
        for step in range(self.server_steps):
            extra = None
            if self.graph_generator:
                edge_index, edge_weight = self._graph()
                # The graph generator needs the prior graph, which setup() checked.
                assert edge_index is not None
                z = hn.embed(edge_index, edge_weight)
                theta = hn.generate(z[clients])
                extra = self.lambda_d * hn.reconstruction_loss(
                    z, edge_index, self._negative_edges(edge_index, rnd, step))
            else:
                theta = self._generate(hn, clients)
            if target is None:
                # theta_t^(0) + delta_t: the first step is exactly the -delta rule.
                target = theta.detach() + delta
            hypernetwork_update(hn, self.server_optimizer, theta, scale * (target - theta.detach()),
                                extra_loss=extra, max_grad_norm=self.max_grad_norm)
        log.debug("round %d: %d clients, mean |delta| %.4f", rnd, graph.num_clients,
                  float(graph.delta.norm(dim=1).mean()))

    def personalized_params(self, clients: Tensor) -> Tensor | None:
        r"""The generated models of ``clients`` (held-out clients included),
        evaluated without fine-tuning (paper Table III)."""
        hn = self._require_hypernetwork()
        with torch.no_grad():
            return self._generate(hn, clients.to(torch.long))

    def client_embeddings(self) -> Tensor:
        r"""The encoder outputs :math:`\mathbf{z}_i` of every client
        :math:`(N, H)` (held-out clients included), from the current
        hypernetwork over the prior graph (GCN encoder) or from the client
        embeddings alone (MLP encoder), without gradient; the generated
        models are their images under the head
        (:meth:`~pyg_fedgraph.nn.GCNHypernetwork.generate`)."""
        hn = self._require_hypernetwork()
        edge_index, edge_weight = self._encoder_graph()
        with torch.no_grad():
            return hn.embed(edge_index, edge_weight)

    def collaboration_graph(self) -> Tensor | None:
        r"""The GCN propagation matrix
        :math:`\hat{\mathbf{D}}^{-1/2}\hat{\mathbf{A}}\hat{\mathbf{D}}^{-1/2}`
        :math:`(N, N)` (row :math:`i` = weights client :math:`i` gives its
        neighbours in each encoder layer); ``None`` for the MLP encoder."""
        if self.ctx is None or self.encoder != "gcn":
            return None
        edge_index, edge_weight = self._graph()
        n = self.ctx.num_clients
        ei, ew = gcn_norm(edge_index, edge_weight, n, add_self_loops=True)
        # gcn_norm's edges j -> i carry the weight node i gives node j.
        return to_dense_adj(ei.flip(0), edge_attr=ew, max_num_nodes=n)[0]

    # ------------------------------------------------------------ helpers
    def _require_hypernetwork(self) -> GCNHypernetwork:
        self._require_setup()
        if self.hypernetwork is None:
            raise RuntimeError(f"{type(self).__name__}.setup() must be called first")
        return self.hypernetwork

    def _graph(self) -> tuple[Tensor | None, Tensor | None]:
        ctx = self._require_setup()
        return ctx.edge_index, ctx.edge_weight

    def _encoder_graph(self) -> tuple[Tensor | None, Tensor | None]:
        r"""The graph the encoder reads: the prior client graph for the GCN
        encoder, ``(None, None)`` for the MLP encoder."""
        if self.encoder != "gcn":
            return None, None
        edge_index, edge_weight = self._graph()
        if edge_index is None:
            raise ValueError(f"{type(self).__name__}'s GCN encoder needs the federation's "
                             f"prior client graph, and this one has none")
        return edge_index, edge_weight

    def _generate(self, hn: GCNHypernetwork, clients: Tensor) -> Tensor:
        edge_index, edge_weight = self._encoder_graph()
        return hn(edge_index, edge_weight, clients=clients)

    def _negative_edges(self, edge_index: Tensor, rnd: int, step: int) -> Tensor:
        # PyG's negative_sampling draws from torch's global RNG and, for large
        # populations, from Python's `random` module (random.sample): seed both
        # from the stream (seed, "negative-sampling", round, step), leaving the
        # caller's random states untouched. (Seeding torch's alone left runs
        # irreproducible from one process to the next.)
        ctx = self._require_setup()
        seed = derive_seed(ctx.seed, "negative-sampling", rnd, step)
        python_state = random.getstate()
        try:
            random.seed(seed)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                return negative_sampling(edge_index.cpu(), num_nodes=ctx.num_clients).to(
                    edge_index.device)
        finally:
            random.setstate(python_state)


@register_strategy("pfedhn")
class PFedHN(Panacea):
    r"""pFedHN from the `"Personalized Federated Learning using Hypernetworks"
    <https://arxiv.org/abs/2103.04628>`_ paper (Shamsian et al., 2021), the
    hypernetwork baseline of Panacea (Table II).

    An MLP hypernetwork maps each client's learnable embedding
    :math:`\mathbf{v}_t` to its model, :math:`\theta_t = h(\mathbf{v}_t;
    \varphi)`, and after local training from :math:`\theta_t` is updated with

    .. math::
        \varphi \leftarrow \varphi - \alpha \sum_{t \in S_r}
        \Big(\frac{\partial \theta_t}{\partial \varphi}\Big)^{\top}
        (-\Delta\theta_t).

    This is :class:`Panacea` with ``encoder="mlp"`` and no graph generator:
    the prior graph is never read. Defaults follow the authors' code
    (AvivSham/pFedHN, ``experiments/pfedhn/trainer.py``): embedding size
    :math:`1 + \lfloor N/4 \rfloor`, width 100, an embedding MLP of one input
    and three hidden Linear layers followed by a linear output head, SGD with
    momentum 0.9, learning rate 0.01 and weight decay 0.001 (not on the
    embeddings here, see :class:`Panacea`), gradient norm clipped at 50, one
    hypernetwork step per client update and 50 inner steps. pFedHN visits one
    client per step; here the :math:`S` clients of a round are batched into
    one step on the *sum* of their gradients (``client_reduction="sum"``),
    the first-order equivalent of :math:`S` consecutive single-client steps,
    so ``hn_lr`` keeps its per-client meaning; ``client_reduction="mean"``
    averages them instead (a step of ``hn_lr / S`` per client): with it, at
    client lr 0.003, our FL-60 runs match Panacea's Table II pFedHN, which
    the summed rule does not (``benchmarks/results/fl60_protocol.md``). The
    operator applies a ReLU before the head, which pFedHN's code does not.

    Novel clients are generated from their untrained initial embeddings
    without fine-tuning, as in Panacea's Table III (pFedHN itself tunes a new
    embedding for a novel client, Sec. 3.3 of its paper).

    Args:
        embedding_dim (int, optional): client embedding size; :obj:`None`
            uses pFedHN's :math:`1 + \lfloor N/4 \rfloor` (default: :obj:`None`)
        hidden_channels (int, optional): hidden width (pFedHN: 100)
            (default: :obj:`100`)
        num_gnn_layers (int, optional): Linear layers of the embedding MLP
            (pFedHN: 1 + 3 hidden) (default: :obj:`4`)
        num_mlp_layers (int, optional): layers of the output head (pFedHN:
            one linear head) (default: :obj:`1`)
        hn_lr (float, optional): hypernetwork learning rate (pFedHN: 0.01)
            (default: :obj:`0.01`)
        optimizer (str, optional): ``"sgd"`` (pFedHN) or ``"adam"``
            (default: :obj:`"sgd"`)
        hn_weight_decay (float, optional): weight decay of the hypernetwork
            (pFedHN: 0.001) (default: :obj:`1e-3`)
        server_steps (int, optional): hypernetwork steps per round
            (pFedHN: 1) (default: :obj:`1`)
        local_steps (int, optional): local steps (pFedHN: 50); :obj:`None`
            uses the run's settings (default: :obj:`None`)
        max_grad_norm (float, optional): gradient clipping (pFedHN: 50)
            (default: :obj:`50.0`)
        chunk_size (int, optional): chunked output head (default: :obj:`None`)
        client_reduction (str, optional): ``"sum"`` or ``"mean"`` of the
            clients' gradients (default: :obj:`"sum"`)
    """
    needs_prior_graph = False

    def __init__(self,
                 embedding_dim: Annotated[int | None, Range(ge=1),
                                          Search(choices=(8, 16, 32, 64))] = None,
                 hidden_channels: Positive = 100, num_gnn_layers: Positive = 4,
                 num_mlp_layers: Positive = 1, hn_lr: HypernetworkLR = 1e-2,
                 optimizer: OptimizerName = "sgd", hn_weight_decay: NonNegative = 1e-3,
                 server_steps: Positive = 1,
                 local_steps: Annotated[int | None, Range(ge=1)] = None,
                 max_grad_norm: Annotated[float | None, Range(gt=0.0)] = 50.0,
                 chunk_size: Annotated[int | None, Range(ge=1)] = None,
                 client_reduction: Literal["mean", "sum"] = "sum") -> None:
        super().__init__(embedding_dim=embedding_dim, hidden_channels=hidden_channels,
                         num_gnn_layers=num_gnn_layers, num_mlp_layers=num_mlp_layers,
                         encoder="mlp", graph_generator=False, lambda_d=0.0, hn_lr=hn_lr,
                         optimizer=optimizer, hn_weight_decay=hn_weight_decay,
                         server_steps=server_steps, local_steps=local_steps,
                         max_grad_norm=max_grad_norm, chunk_size=chunk_size,
                         client_reduction=client_reduction)

