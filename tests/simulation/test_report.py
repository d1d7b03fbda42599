import csv
import json

import numpy as np
import torch

from pyg_fedgraph.engine.history import History, RoundRecord
from pyg_fedgraph.simulation.report import top_k_weights, write_collaboration, write_run


def _read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _history(n: int) -> History:
    h = History("accuracy", True)
    for r in (1, 2):
        vals = {"accuracy": torch.linspace(0.0, 1.0, n)}
        h.append(RoundRecord(r, 1.0, vals, vals, 0.1, n))
    return h


def test_npz_round_trip_equals_the_matrix(tmp_path):
    torch.manual_seed(0)
    w = torch.rand(7, 7, dtype=torch.double)
    write_collaboration(tmp_path, w)
    with np.load(tmp_path / "collaboration.npz", allow_pickle=False) as data:
        assert list(data) == ["weight"]
        loaded = data["weight"]
    assert loaded.dtype == np.float32
    np.testing.assert_array_equal(loaded, w.float().numpy())


def test_top_k_csv_rows_are_the_k_largest_of_each_row(tmp_path):
    w = torch.tensor([[0.5, 0.1, 0.3, 0.1, 0.0],
                      [0.0, 0.2, 0.0, 0.0, 0.8],
                      [0.25, 0.25, 0.2, 0.15, 0.15],
                      [0.0, 0.0, 0.0, 1.0, 0.0],
                      [0.1, 0.6, 0.05, 0.05, 0.2]])
    write_collaboration(tmp_path, w, top_k=3)
    rows = _read_csv(tmp_path / "collaboration_topk.csv")
    assert list(rows[0]) == ["client", "rank", "neighbour", "weight"]
    got = {}
    for r in rows:
        got.setdefault(int(r["client"]), []).append((int(r["rank"]), int(r["neighbour"]),
                                                     float(r["weight"])))
    # by hand: largest first, zero weights left out, the client itself included
    assert [(j, v) for _, j, v in got[0]] == [(0, 0.5), (2, 0.3), (got[0][2][1], 0.1)]
    assert got[0][2][1] in (1, 3)
    assert [(j, v) for _, j, v in got[1]] == [(4, 0.8), (1, 0.2)]
    assert [v for _, _, v in got[2]] == [0.25, 0.25, 0.2]
    assert [(j, v) for _, j, v in got[3]] == [(3, 1.0)]
    assert [(j, v) for _, j, v in got[4]] == [(1, 0.6), (4, 0.2), (0, 0.1)]
    assert all([rank for rank, _, _ in got[i]] == list(range(1, len(got[i]) + 1))
               for i in got)
    # each weight reads back exactly (float32 text) and is one of the row's k largest
    for r in rows:
        i, j = int(r["client"]), int(r["neighbour"])
        assert np.float32(r["weight"]) == w[i, j].numpy()
        assert w[i, j] >= w[i].sort(descending=True).values[2]


def test_top_k_weights_matches_sorting_each_row():
    torch.manual_seed(1)
    w = torch.rand(20, 20)
    client, rank, neighbour, value = top_k_weights(w, 4)
    assert client.numel() == 80
    expected = w.sort(dim=1, descending=True).values[:, :4].reshape(-1)
    torch.testing.assert_close(value, expected)
    torch.testing.assert_close(w[client, neighbour], value)
    assert rank.view(20, 4).tolist() == [[1, 2, 3, 4]] * 20


def test_full_csv_only_for_small_federations(tmp_path):
    w = torch.full((4, 4), 0.25)
    small, large = tmp_path / "small", tmp_path / "large"
    small.mkdir()
    large.mkdir()
    assert write_collaboration(small, w) == ["collaboration.npz", "collaboration_topk.csv",
                                             "collaboration.csv"]
    rows = _read_csv(small / "collaboration.csv")
    assert list(rows[0]) == ["c0", "c1", "c2", "c3"]
    assert [[float(v) for v in r.values()] for r in rows] == [[0.25] * 4] * 4
    assert write_collaboration(large, w, full_csv_max_clients=3) == [
        "collaboration.npz", "collaboration_topk.csv"]
    assert not (large / "collaboration.csv").exists()


def test_write_run_writes_every_file(tmp_path):
    n = 6
    w = torch.softmax(torch.randn(n, n), dim=1)
    summary = {"strategy": "s", "dataset": "d", "rounds": 2, "test": float("nan")}
    write_run(tmp_path, _history(n), {"a": 1}, summary, collaboration=w,
              groups=torch.tensor([0, 0, 1, 1, 2, 2]),
              prior_edge_index=torch.tensor([[0, 1], [1, 0]]))
    names = {p.name for p in tmp_path.iterdir()}
    assert names == {"config.json", "history.csv", "clients.csv", "summary.json",
                     "learning_curve.png", "collaboration.npz", "collaboration_topk.csv",
                     "collaboration.csv", "collaboration_matrix.png", "collaboration_graph.png"}
    assert json.loads((tmp_path / "summary.json").read_text())["test"] is None
    assert len(_read_csv(tmp_path / "clients.csv")) == n


def test_pictures_of_synthetic_data_say_so_in_their_titles(tmp_path, monkeypatch):
    import pyg_fedgraph.viz as viz
    titles = {}
    for name in ("plot_learning_curves", "plot_collaboration_matrix",
                 "plot_collaboration_network"):
        original = getattr(viz, name)

        def spy(*args, _original=original, _name=name, **kwargs):
            fig = _original(*args, **kwargs)
            titles.setdefault(_name, []).append(
                fig.texts[0].get_text() if fig.texts and _name == "plot_learning_curves"
                else fig.axes[0].get_title())
            return fig
        monkeypatch.setattr(viz, name, spy)
    n = 4
    w = torch.full((n, n), 1.0 / n)
    for synthetic in (True, False):
        summary = {"strategy": "s", "dataset": "metr-la", "rounds": 2,
                   "synthetic_data": synthetic}
        write_run(tmp_path / str(synthetic), _history(n), {}, summary, collaboration=w)
    for name, (with_flag, without) in titles.items():
        assert "(synthetic data)" in with_flag, name
        assert "synthetic" not in without, name
    assert titles["plot_learning_curves"][0] == "s on metr-la (synthetic data)"
