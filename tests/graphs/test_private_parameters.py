r"""Parameters that stay on the client: the split, the simulator, resuming
and the refusals."""
import pytest
import torch
from torch import nn

from pyg_fedgraph.data.layout import ParamLayout
from pyg_fedgraph.datasets import planted_graphs
from pyg_fedgraph.models import build_model
from pyg_fedgraph.simulation import Simulator
from pyg_fedgraph.strategies import STRATEGIES, build_strategy
from pyg_fedgraph.train import LocalConfig
from pyg_fedgraph.train.private import OnSharedPart, PrivateParameters, private_prefixes
from pyg_fedgraph.train.regularizers import ProximalTerm

LOCAL = LocalConfig(optimizer="adam", lr=0.01, full_batch=True, epochs=2)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(2, 3)       # 6 + 3 values
        self.head = nn.Linear(3, 2)       # 6 + 2 values
        self.tail = nn.Linear(2, 1)       # 2 + 1 values


def test_the_split_by_hand():
    layout = ParamLayout.from_module(Net())
    priv = PrivateParameters(layout, ["head"])
    assert priv.shared_index.tolist() == list(range(9)) + [17, 18, 19]
    assert priv.private_index.tolist() == list(range(9, 17))
    assert priv.private_names == ["head.weight", "head.bias"]
    shared = priv.shared_layout
    assert shared.num_params == 12 and shared.layer_names == ["body", "tail"]
    assert shared.layer_slice("tail") == slice(9, 12)
    full = torch.arange(40.0).view(2, 20)
    assert torch.equal(priv.share(full), full[:, priv.shared_index])
    # lift(share(x), x) gives x back; lift takes the private part from its second argument.
    assert torch.equal(priv.lift(priv.share(full), full), full)
    other = -full
    mixed = priv.lift(priv.share(full), other)
    assert torch.equal(mixed[:, priv.shared_index], full[:, priv.shared_index])
    assert torch.equal(mixed[:, priv.private_index], other[:, priv.private_index])


def test_declarations_and_errors():
    model = Net()
    assert private_prefixes(model) == ()
    assert private_prefixes(model, "head, tail") == ("head", "tail")
    model.private_parameters = ("tail",)
    assert private_prefixes(model) == ("tail",)
    layout = ParamLayout.from_module(model)
    with pytest.raises(ValueError, match=r"private parameters \['classifier'\] match no "
                                         r"parameter of the model; its parameters are body"):
        PrivateParameters(layout, ["classifier"])
    with pytest.raises(ValueError, match="every parameter is private"):
        PrivateParameters(layout, ["body", "head", "tail"])
    with pytest.raises(ValueError, match="5 shared values sent; the shared part of the model "
                                         "has 12"):
        PrivateParameters(layout, ["head"]).lift(torch.zeros(1, 5), torch.zeros(1, 20))


def test_a_regularizer_acts_on_the_shared_coordinates():
    priv = PrivateParameters(ParamLayout.from_module(Net()), ["head"])
    center = torch.randn(1, 12)
    reg = OnSharedPart(ProximalTerm(center, coefficient=2.0), priv.shared_index)
    theta = torch.randn(20)
    expected = 0.5 * 2.0 * (theta[priv.shared_index] - center[0]).pow(2).sum()
    assert torch.allclose(reg.penalty(theta, *(r[0] for r in reg.refs)), expected)
    assert reg.select(torch.tensor([0])).refs[0].shape == (1, 12)


def graph_federation():
    return planted_graphs(num_clients=8, num_nodes=240, num_features=8)


def gcn(data):
    torch.manual_seed(0)
    return build_model("gcn", data.input_shape, data.num_classes, hidden_channels=8)


def simulator(name, data=None, private="classifier", rounds=2, **kwargs):
    data = data or graph_federation()
    return Simulator(data, gcn(data), build_strategy(name, **kwargs), rounds=rounds,
                     local=LOCAL, private=private, sample_fraction=1.0)


@pytest.mark.parametrize("name", ["pfedgraph", "fedaghn", "ditto"])
def test_the_server_sees_the_shared_part_only_and_private_parts_differ(name):
    sim = simulator(name)
    uploads = []
    aggregate = sim.engine.aggregate_train

    def spy(rnd, clients, params, start, outputs=None, loss=None):
        uploads.append((params, start, dict(outputs or {})))
        return aggregate(rnd, clients, params, start, outputs, loss)

    sim.engine.aggregate_train = spy
    sim.run()
    priv = sim.private
    d_s = priv.num_shared
    assert d_s == sim.layout.num_params - (8 * 4 + 4)  # the classifier: 8 -> 4 classes
    assert sim.engine.table.params.shape == (8, d_s)
    assert sim.engine.layout.param_names == [n for n in sim.layout.param_names
                                             if not n.startswith("classifier")]
    for params, start, outputs in uploads:
        assert params.size(1) == d_s and start.size(1) == d_s
        assert all(v.size(-1) == d_s for v in outputs.values() if v.dim() == 2)
    # The clients keep whole models: the shared part is what the server holds ...
    assert torch.equal(priv.share(sim.local_params), sim.engine.table.params)
    # ... and the private parts trained, each client its own.
    private = sim.local_params[:, priv.private_index]
    init = sim.trainer.layout.flatten(sim.trainer.model)[priv.private_index]
    assert not torch.allclose(private, init.expand_as(private))
    assert torch.cdist(private, private).add(torch.eye(8)).min() > 0
    # What is evaluated is each client's shared part with its own private part.
    models, _ = sim.personalized_models()
    assert torch.equal(models[:, priv.private_index], private)


def test_without_a_private_part_nothing_changes():
    a, b = simulator("pfedgraph", private=None), simulator("pfedgraph", private="")
    a.run()
    b.run()
    assert a.private is None and b.private is None
    assert torch.equal(a.local_params, b.local_params)
    assert a.engine.table.params.size(1) == a.layout.num_params


def test_a_checkpoint_keeps_both_parts_and_resumes_exactly():
    whole = simulator("pfedgraph", rounds=3)
    whole.run()
    first = simulator("pfedgraph", rounds=3)
    first.run(1)
    state = first.state_dict()
    assert state["local_params"].size(1) == first.layout.num_params
    resumed = simulator("pfedgraph", rounds=3)
    resumed.load_state_dict(state)
    resumed.run()
    assert torch.allclose(resumed.local_params, whole.local_params, atol=1e-6)
    assert torch.allclose(resumed.engine.table.params, whole.engine.table.params, atol=1e-6)


REFUSING = sorted(n for n, cls in STRATEGIES.items() if not cls.supports_private_parameters)


def test_the_strategies_that_need_whole_models_are_declared():
    assert REFUSING == ["fedala", "fedrep", "fedrod", "ifca"]


@pytest.mark.parametrize("name", REFUSING)
def test_strategies_that_need_whole_models_refuse_a_private_part_in_one_line(name):
    with pytest.raises(ValueError) as err:
        simulator(name)
    assert str(err.value) == (f"strategy {name!r} works on whole models and cannot leave "
                              f"parameters ['classifier'] private to the clients")


@pytest.mark.parametrize("name", sorted(set(STRATEGIES) - set(REFUSING)))
def test_every_other_strategy_runs_with_a_private_head(name):
    sim = simulator(name, rounds=2)
    sim.run()
    assert sim.engine.table.params.size(1) == sim.private.num_shared
    assert len(sim.history) == 2


def test_the_command_line_refuses_before_any_training(tmp_path, capsys):
    from pyg_fedgraph.cli import main

    args = ["run", "--dataset", "planted-graphs", "--rounds", "1", "--out", str(tmp_path),
            "--quiet", "--set", "data.num_clients=4", "--set", "data.num_nodes=120"]
    code = main(args + ["--strategy", "pfedgraph,fedrep", "--set", "private=classifier"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "strategy 'fedrep' works on whole models" in err
    assert not (tmp_path / "pfedgraph").exists()  # nothing trained first
    code = main(args + ["--strategy", "fedavg", "--set", "private=head"])
    assert code == 2
    assert "private parameters ['head'] match no parameter" in capsys.readouterr().err
    code = main(args + ["--strategy", "pfedgraph", "--set", "private=classifier"])
    assert code == 0
