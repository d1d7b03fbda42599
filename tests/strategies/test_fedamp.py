"""The original FedAMP (Huang et al., 2021) and the state version that keeps the old name apart."""
import io
import math

import pytest
import torch
from strategy_toys import two_group_dataset

from pyg_fedgraph.cli import main
from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.models.mlp import MLP
from pyg_fedgraph.simulation.simulator import Simulator
from pyg_fedgraph.strategies import STRATEGIES, FedAMP, HeurFedAMP, build_strategy
from pyg_fedgraph.strategies.base import FederationContext
from pyg_fedgraph.strategies.fedamp import fedamp_weights
from pyg_fedgraph.train.config import LocalConfig


def _context(models):
    n, d = models.shape
    layout = ParamLayout.from_module(torch.nn.Linear(d - 1, 1))  # d parameters
    ctx = FederationContext(num_clients=n, layout=layout, init_params=torch.zeros(d),
                            num_samples=torch.ones(n, dtype=torch.long))
    ctx.table.update(torch.arange(n), models)
    return ctx


def _simulator(strategy, rounds=3, seed=0):
    torch.manual_seed(seed)
    return Simulator(two_group_dataset(), MLP(2, 8, 2, num_layers=2), strategy, rounds=rounds,
                     local=LocalConfig(lr=0.1, batch_size=8, epochs=2), seed=seed)


def test_weights_of_three_clients_by_hand():
    # Squared distances: |w0 - w1|^2 = 1, |w0 - w2|^2 = 4, |w1 - w2|^2 = 5.
    w = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    sigma, alpha_k = 2.0, 0.5
    a = alpha_k / sigma  # alpha_k A'(d) = alpha_k / sigma * exp(-d / sigma)
    x01, x02, x12 = a * math.exp(-0.5), a * math.exp(-2.0), a * math.exp(-2.5)
    expected = torch.tensor([[1 - x01 - x02, x01, x02],
                             [x01, 1 - x01 - x12, x12],
                             [x02, x12, 1 - x02 - x12]])
    xi = fedamp_weights(w, sigma=sigma, alpha_k=alpha_k)
    torch.testing.assert_close(xi, expected)
    # The strategy sends u_i = sum_j xi_ij w_j and lam / alpha_k as the proximal coefficient.
    strategy = FedAMP(lam=3.0, alpha_k=alpha_k, sigma=sigma)
    strategy.setup(_context(w))
    plan = strategy.configure_train(2, torch.tensor([2, 0]))
    cloud, coefficient = plan.regularizer.refs
    torch.testing.assert_close(cloud, torch.stack([
        torch.tensor([x12 * 1.0, (1 - x02 - x12) * 2.0]),
        torch.tensor([x01 * 1.0, x02 * 2.0])]))
    assert coefficient.tolist() == [6.0, 6.0] and plan.params is None
    torch.testing.assert_close(strategy.collaboration_graph()[[2, 0]], expected[[2, 0]])
    assert strategy.collaboration_graph()[1].tolist() == [0.0, 1.0, 0.0]  # not sent yet
    # lam / (2 alpha_k) |theta - u|^2 for client 2 at theta = u + (1, 2): 3 * 5.
    assert float(plan.regularizer.penalty(cloud[0] + torch.tensor([1.0, 2.0]), cloud[0],
                                     coefficient[0])) == pytest.approx(15.0)


def test_closer_models_weigh_more_and_non_sources_pass_nothing():
    w = torch.tensor([[0.0, 0.0], [0.5, 0.0], [3.0, 0.0]])
    xi = fedamp_weights(w, sigma=1.0, alpha_k=0.1)
    assert xi[0, 1] > xi[0, 2] > 0 and torch.allclose(xi.sum(1), torch.ones(3))
    # A larger sigma flattens the attention (and shrinks it, as A' = exp(-d/s)/s).
    flat = fedamp_weights(w, sigma=100.0, alpha_k=0.1)
    assert float(flat[0, 1] / flat[0, 2]) < float(xi[0, 1] / xi[0, 2])
    masked = fedamp_weights(w, sigma=1.0, alpha_k=0.1, sources=torch.tensor([True, False, True]))
    assert masked[0, 1] == 0 and masked[2, 1] == 0 and masked[1, 0] == xi[1, 0]
    torch.testing.assert_close(masked.sum(1), torch.ones(3))
    with pytest.raises(ValueError, match="sources must be a mask of the 3 clients"):
        fedamp_weights(w, sources=torch.ones(2, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"num_clients, num_params"):
        fedamp_weights(torch.ones(3))


def test_first_round_cloud_is_the_clients_own_model():
    sim = _simulator(FedAMP(lam=5.0), rounds=1)
    plan = sim.strategy.configure_train(1, torch.arange(4))
    cloud, _ = plan.regularizer.refs
    assert torch.equal(cloud, sim.local_params)  # nobody has trained: u_i = w_i = w^0
    assert torch.equal(sim.strategy.collaboration_graph(), torch.eye(4))


def test_registered_hparams_and_search_space():
    assert STRATEGIES["fedamp"] is FedAMP and STRATEGIES["heurfedamp"] is HeurFedAMP
    assert build_strategy("fedamp", sigma=5.0).hparams() == {"lam": 1.0, "alpha_k": 1.0,
                                                             "sigma": 5.0}
    assert set(FedAMP.hparam_schema()) == {"lam", "alpha_k", "sigma"}
    with pytest.raises(ValueError, match="sigma must be > 0"):
        FedAMP(sigma=0.0)
    with pytest.raises(ValueError, match="has no option"):
        build_strategy("fedamp", self_weight=0.3)  # an option of heurfedamp only


def test_groups_attend_to_each_other_in_simulation():
    # sigma large against the squared distances of these small models.
    sim = _simulator(FedAMP(sigma=5.0, alpha_k=0.5), rounds=3)
    sim.run()
    w = sim.strategy.collaboration_graph()
    torch.testing.assert_close(w.sum(1), torch.ones(4, dtype=w.dtype))
    assert w[0, 1] > w[0, 2] and w[0, 1] > w[0, 3]
    assert w[2, 3] > w[2, 0] and w[2, 3] > w[2, 1]
    assert sim.strategy.personalized_params(torch.arange(4)) is None


def test_a_state_of_the_old_fedamp_is_refused_with_one_line():
    # A state saved under "fedamp" before the rename: the heuristic strategy's, version 1.
    old = _simulator(HeurFedAMP(), rounds=1)
    old.run()
    buffer = io.BytesIO()
    torch.save(old.strategy.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert state._metadata[""]["version"] == 1
    new = _simulator(FedAMP(), rounds=1)
    with pytest.raises(ValueError) as err:
        new.strategy.load_state_dict(state)
    message = str(err.value)
    assert "\n" not in message and "'heurfedamp'" in message and "heuristic" in message
    # The new state carries version 2 and loads into FedAMP (and not into HeurFedAMP).
    new.run()
    state = new.strategy.state_dict()
    assert state._metadata[""]["version"] == 2
    fresh = _simulator(FedAMP(), rounds=1)
    fresh.strategy.load_state_dict(state)
    torch.testing.assert_close(fresh.strategy.weights, new.strategy.weights)
    with pytest.raises(ValueError, match="has format version 2, this version of pyg_fedgraph "
                                         "reads version 1"):
        _simulator(HeurFedAMP(), rounds=1).strategy.load_state_dict(state)


def test_cli_resume_of_an_old_fedamp_run_fails_with_one_line(tmp_path, capsys):
    # An old run: the heuristic strategy's checkpoint under the name "fedamp".
    out = tmp_path / "run"
    assert main(["run", "--dataset", "fl60", "--strategy", "heurfedamp", "--rounds", "2",
                 "--set", "steps=1", "--set", "data.samples_per_client=20", "--clients", "4",
                 "--out", str(out), "--checkpoint-every", "1", "--quiet"]) == 0
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    state["strategy_name"] = "fedamp"
    state["run"]["config"]["strategy"] = "fedamp"
    torch.save(state, out / "checkpoint.pt")
    manifest = (out / "run.json")
    if manifest.is_file():
        manifest.write_text(manifest.read_text().replace('"heurfedamp"', '"fedamp"'))
    capsys.readouterr()
    assert main(["run", "--resume", str(out), "--rounds", "3", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'heurfedamp'" in err[0], err


@pytest.mark.parametrize("dataset", ["fl60", "digits"])
def test_cli_runs(tmp_path, dataset):
    assert main(["run", "--dataset", dataset, "--strategy", "fedamp", "--rounds", "2",
                 "--set", "steps=2", "--out", str(tmp_path), "--quiet"]) == 0
