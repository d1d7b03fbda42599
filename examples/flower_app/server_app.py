"""ServerApp: a pyg_fedgraph strategy (pFedGraph by default) behind GraphStrategy."""
import json
import os
from dataclasses import asdict
from logging import INFO

import torch
from flwr.app import Context
from flwr.common import log
from flwr.serverapp import Grid, ServerApp
from task import load_model, local_config

from pyg_fedgraph.integrations.flower import GraphStrategy
from pyg_fedgraph.strategies import build_strategy

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    checkpoint = str(cfg["checkpoint"])

    def save(graph_strategy: GraphStrategy, rnd: int) -> None:
        if checkpoint:
            torch.save(graph_strategy.state_dict(), checkpoint)

    # The server never sees client data: each client reports its partition id
    # and sample count when it first connects.
    strategy = GraphStrategy(build_strategy(str(cfg["strategy"])), load_model(int(cfg["seed"])),
                             num_clients=int(cfg["num-clients"]), seed=int(cfg["seed"]),
                             local=local_config(cfg), evaluate_every=int(cfg["evaluate-every"]),
                             on_round_end=save)
    if checkpoint and bool(cfg["resume"]) and os.path.exists(checkpoint):
        strategy.load_state_dict(torch.load(checkpoint, weights_only=True))
        log(INFO, "resumed from %s after round %d", checkpoint, strategy.rounds_done)
    strategy.start(grid, num_rounds=int(cfg["num-server-rounds"]))

    last = strategy.evaluate_metrics[strategy.rounds_done]
    accuracy = {pid: round(m["test-accuracy"], 4) for pid, m in sorted(last.items())}
    log(INFO, "test accuracy per client after round %d: %s", strategy.rounds_done,
             json.dumps(accuracy))
    graph = strategy.strategy.collaboration_graph()
    if graph is not None:
        log(INFO, "collaboration graph (row i = weights client i gives):\n%s",
                 "\n".join(" ".join(f"{w:.2f}" for w in row) for row in graph.tolist()))
    results = str(cfg["results"])
    if results:
        # Per-client metrics are keyed by round, then by partition id.
        torch.save({"personalized-params": strategy.personalized_params(),
                    "collaboration-graph": graph,
                    "train-metrics": strategy.train_metrics,
                    "evaluate-metrics": strategy.evaluate_metrics,
                    "dropped": [asdict(d) for d in strategy.dropped]}, results)
        log(INFO, "saved every client's model and metrics to %s", results)
