r"""A run's files: config files read, and the run folder written.

**Config files** (``pyg-fedgraph run --config exp.yaml``) hold the declared
settings (:mod:`~pyg_fedgraph.experiment.settings`, their long names with
underscores) and a ``set`` map of ``--set`` keys::

    dataset: fashion-mnist
    strategy: local,fedavg,pfedgraph    # or a list
    rounds: 50
    partition: pathological
    classes_per_client: 2
    seeds: [0, 1, 2]
    set:
      lr: 0.01
      steps: 200
      model: cnn            # or a map: {name: cnn, channels: [16, 32, 64]}
      data.pairing: fixed   # or data: {pairing: fixed}
      alpha: 0.8            # a strategy option

The file is read with OmegaConf (YAML's safe loader: a file never runs code)
into a schema generated from the declarations (:func:`file_schema`), so an
unknown key or a value of the wrong type is one line naming the key and the
file; the values then go through the same checks as the flags.

**The run folder**: :func:`write_results` writes what the runner computed
(``history.csv``, ``summary.json``, the pictures, ``config.json``, the
collaboration graph) and the *resolved* config, ``config.yaml``: the
settings the run ran with, defaults filled in, plus a ``provenance`` section
(versions, device, git commit, data checksum) that is informational and
ignored when the file is read back, so that ``pyg-fedgraph run --config
runs/X/config.yaml`` reruns run X.
"""
from __future__ import annotations

import dataclasses
import hashlib
import platform
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import fields, make_dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, get_args, get_origin

from pyg_fedgraph.experiment.settings import (
    ExperimentConfig,
    Option,
    RunOptions,
    options,
    type_arms,
)

if TYPE_CHECKING:
    from pyg_fedgraph.data import FederatedDataset
    from pyg_fedgraph.simulation import Simulator

__all__ = ["CONFIG_NAME", "file_schema", "load_config", "flatten_set", "dump_yaml",
           "data_checksum", "provenance", "resolved_config", "run_summary", "write_results",
           "write_history"]

#: The resolved config a run writes into its folder.
CONFIG_NAME = "config.yaml"


def _file_type(option: Option) -> Any:
    r"""The type OmegaConf checks a key of a config file against (it reads
    ``Optional``, builtin scalars and lists; choices and ranges are checked
    afterwards by the settings themselves)."""
    if option.name == "strategy":  # a name, names separated by commas, or a list
        return Optional[Any]  # noqa: UP045 - OmegaConf reads typing.Optional
    arms = type_arms(option.annotation)
    arm = arms[0]
    if get_origin(arm) is list:
        inner = get_args(arm)[0] if get_args(arm) else Any
        return Optional[list[int]] if inner is int else Optional[list[str]]  # noqa: UP045
    scalar: Any = arm if arm in (int, float, bool, str) else str
    if len(arms) > 1:  # bool | CompileMode and the like
        scalar = Any
    return Optional[scalar]  # noqa: UP045 - OmegaConf reads typing.Optional


@cache
def file_schema() -> type:
    r"""The dataclass OmegaConf checks config files against: every declared
    setting a file may hold (of ``run`` and ``tune``), ``set`` and
    ``provenance``."""
    seen: dict[str, Any] = {}
    for command in ("run", "tune"):
        for option in options(command):
            if option.file and option.name not in seen:
                default = option.default if not isinstance(option.default, list) else None
                seen[option.name] = (option.name, _file_type(option),
                                     dataclasses.field(default=default))
    seen["set"] = ("set", dict[str, Any], dataclasses.field(default_factory=dict))
    seen["provenance"] = ("provenance", dict[str, Any], dataclasses.field(default_factory=dict))
    return make_dataclass("RunFile", list(seen.values()))


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def flatten_set(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    r"""A ``set`` map as ``--set`` keys: nested maps become dotted keys, and
    ``model: {name: cnn, ...}`` becomes ``model=cnn`` plus ``model.<arg>``."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            inner = dict(value)
            if name == "model" and "name" in inner:
                out["model"] = inner.pop("name")
            out.update(flatten_set(inner, f"{name}."))
        else:
            out[name] = value
    return out


def load_config(path: str | Path) -> dict[str, Any]:
    r"""The settings of the config file ``path``, checked against
    :func:`file_schema` (``set`` flattened to ``--set`` keys; ``provenance``
    dropped). Only the keys the file holds are returned (and ``set``, empty
    when missing). Raises one-line :class:`ValueError` s naming the key."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--config {path}: no such file")
    try:
        loaded = OmegaConf.load(path)
    except Exception as err:  # yaml's parse errors come in several types
        raise ValueError(f"--config {path} is not a YAML file: {_one_line(str(err))}") from None
    if not isinstance(loaded, Mapping) and not OmegaConf.is_dict(loaded):
        raise ValueError(f"--config {path}: expected a map of settings at the top, got "
                         f"{type(OmegaConf.to_container(loaded)).__name__}")
    schema = file_schema()
    keys = {f.name: f for f in fields(schema)}
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), loaded)
        container = OmegaConf.to_container(merged, resolve=True)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "?"
        message = str(err).splitlines()[0]
        raise ValueError(f"--config {path}: key {key!r}: {message}") from None
    except TypeError:  # a list where the schema has a map, or the reverse
        wrong = [k for k, v in loaded.items() if k in keys
                 and (OmegaConf.is_list(v) or OmegaConf.is_dict(v))]
        raise ValueError(f"--config {path}: key {wrong[0] if wrong else '?'!r} has the wrong "
                         f"kind of value (a list where a map belongs, or the reverse)") from None
    assert isinstance(container, dict)
    # Only the keys the file gives: the command line's defaults stay for the rest.
    present = {str(k) for k in loaded.keys()}
    values: dict[str, Any] = {str(k): v for k, v in container.items() if str(k) in present}
    values.pop("provenance", None)
    values.setdefault("set", {})
    if not isinstance(values.get("set"), Mapping):
        raise ValueError(f"--config {path}: key 'set' must be a map of --set keys")
    values["set"] = flatten_set(values["set"])
    strategy = values.get("strategy")
    if isinstance(strategy, (list, tuple)):
        values["strategy"] = ",".join(str(s) for s in strategy)
    elif strategy is not None and not isinstance(strategy, str):
        raise ValueError(f"--config {path}: key 'strategy' must be a name, names separated by "
                         f"commas, or a list of names")
    return values


def dump_yaml(values: Mapping[str, Any]) -> str:
    r"""``values`` as YAML (plain types only), keys in the given order."""
    from omegaconf import OmegaConf
    return OmegaConf.to_yaml(OmegaConf.create(_plain(values)))


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)  # strings (their subclasses too, such as torch's version) and others


# ------------------------------------------------------------------ provenance
def data_checksum(dataset: FederatedDataset) -> str:
    r"""SHA-256 of the data a run trained and was evaluated on: every split's
    inputs, targets and counts (for a traffic dataset, its speed and feature
    series, whose windows are views of them), in a fixed order."""
    import torch

    digest = hashlib.sha256()

    def feed(t: torch.Tensor) -> None:
        t = t.detach().cpu().contiguous()
        digest.update(str((tuple(t.shape), str(t.dtype))).encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")

    series = [getattr(dataset, name, None) for name in ("speed", "features")]
    if all(isinstance(s, torch.Tensor) for s in series):
        for s in series:
            assert isinstance(s, torch.Tensor)
            feed(s)
    else:
        for name in sorted(dataset.splits):
            split = dataset.splits[name]
            for t in (split.x, split.y, split.counts):
                feed(t)
    for extra in (dataset.edge_index, dataset.edge_weight):
        if extra is not None:
            feed(extra)
    return digest.hexdigest()


def _git_commit() -> str | None:
    r"""The commit of the package's source tree when it is a git checkout
    (``-dirty`` when it has uncommitted changes), else ``None``."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=5)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def provenance(dataset: FederatedDataset, sim: Simulator | None = None) -> dict[str, Any]:
    r"""Where a run's numbers come from: package versions, the machine and
    device, the git commit of the package when it is a checkout, and the data
    checksum."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    def ver(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    out: dict[str, Any] = {
        "pyg_fedgraph": ver("pyg-fedgraph"), "torch": torch.__version__,
        "torch_geometric": ver("torch-geometric"), "numpy": ver("numpy"),
        "python": sys.version.split()[0], "platform": platform.platform(),
        "git_commit": _git_commit(), "data_sha256": data_checksum(dataset),
        "threads": torch.get_num_threads(),
    }
    if sim is not None:
        out["device"] = str(sim.device)
        if sim.device.type == "cuda":
            out["device_name"] = torch.cuda.get_device_name(sim.device)
            out["cuda"] = torch.version.cuda
    return out


# ------------------------------------------------------------------ resolution
def resolved_config(sim: Simulator, cfg: ExperimentConfig, run: RunOptions | None = None
                    ) -> dict[str, Any]:
    r"""The settings of one finished run as a config file holds them, every
    default filled in, plus its provenance: every declared setting a config
    file may hold (the run's value, resolved against the data where the data
    decided it: rounds, clients, partition), and under ``set`` the local
    training, the model and its arguments, the simulator's settings and the
    strategy's options as they were."""
    from pyg_fedgraph.experiment.build import dataset_options, resolved_model
    from pyg_fedgraph.simulation.config import SIM_KEYS
    from pyg_fedgraph.train.config import LOCAL_SCHEMA, LOCAL_WHEN_SET

    run = run or RunOptions()
    data = sim.dataset
    model_name, model_kwargs = resolved_model(cfg, data)
    overrides = dict(cfg.overrides)
    resolved: dict[str, Any] = {k: v for k, v in overrides.items() if k.startswith("data.")}
    local = sim.trainer.config
    own = set(sim.strategy.hparams())
    # A client setting the strategy also declares is written local.<key> (route_overrides).
    clients = {k: getattr(local, k) for k in LOCAL_SCHEMA if k not in LOCAL_WHEN_SET}
    clients.update(local.optional_set())
    resolved.update({f"local.{k}" if k in own else k: v for k, v in clients.items()})
    resolved["model"] = model_name
    resolved.update({f"model.{k}": v for k, v in model_kwargs.items()})
    for key in SIM_KEYS:
        if key in ("state_device", "compile"):
            if key in overrides:
                resolved[key] = overrides[key]
        else:
            resolved[key] = getattr(sim, key)
    resolved.update(sim.strategy.hparams())
    # What the data decided, pinned where its builder takes it.
    takes = dataset_options(cfg.dataset)
    partition = data.info.get("partition")
    decided = {"rounds": sim.rounds,
               "clients": data.num_clients if "num_clients" in takes else cfg.clients,
               "partition": partition if "partition" in takes and isinstance(partition, str)
               else cfg.partition}
    out: dict[str, Any] = {}
    for option in options("run"):
        if not option.file:
            continue
        source = cfg if option.owner is ExperimentConfig else run
        value = decided.get(option.name, getattr(source, option.name))
        out[option.name] = value
    out["set"] = resolved
    out["provenance"] = provenance(data, sim)
    return out


# ------------------------------------------------------------------ run folder
def run_summary(sim: Simulator, cfg: ExperimentConfig, seconds: float) -> dict[str, Any]:
    r"""``summary.json`` of a run: the engine's summary (the papers'
    protocol) with the run's name, timing and data."""
    dataset = sim.dataset
    return {"strategy": cfg.strategy, "dataset": cfg.dataset, **sim.summary(),
            "seconds": seconds, "seconds_per_round": seconds / max(sim.round, 1),
            "num_clients": dataset.num_clients, "seed": cfg.seed,
            "synthetic_data": bool(dataset.info.get("synthetic"))}


def write_results(folder: Path, sim: Simulator, cfg: ExperimentConfig,
                  summary: Mapping[str, Any], run: RunOptions | None = None) -> None:
    r"""Writes a run's files into ``folder``: history, summary, per-client
    metrics, pictures, the collaboration graph, ``config.json`` (the settings
    and what they resolved to), ``config.yaml`` (:func:`resolved_config`) and,
    with ``run.save_models``, every client's personalized model."""
    import torch

    from pyg_fedgraph.simulation.report import write_models, write_run

    run = run or RunOptions()
    config = {**cfg.to_dict(), "resolved": {
        "rounds": sim.rounds, "local": vars(sim.trainer.config),
        "model": repr(sim.trainer.model), "strategy": sim.strategy.hparams(),
        "num_params": sim.layout.num_params, "device": str(sim.device),
        "state_device": str(sim.state_device), "execution": sim.execution,
        "parallel_clients": sim.parallel_clients, "precision": sim.trainer.precision,
        "compile": sim.trainer.compile,
        "threads": torch.get_num_threads(),
        "deterministic": torch.are_deterministic_algorithms_enabled()}}
    write_run(folder, sim.history, config, summary,
              collaboration=sim.strategy.collaboration_graph(),
              groups=sim.dataset.client_labels, prior_edge_index=sim.dataset.edge_index)
    (folder / CONFIG_NAME).write_text(dump_yaml(resolved_config(sim, cfg, run)))
    if run.save_models:
        params, buffers = sim.personalized_models()
        write_models(folder, sim.layout, params, buffers, repr(sim.trainer.model))


def write_history(folder: Path, sim: Simulator) -> None:
    r"""Writes the history of the finished rounds of a run that was stopped
    (``history.csv``), so that its rounds are on disk before it resumes."""
    from pyg_fedgraph.simulation.report import write_csv

    if len(sim.history):
        write_csv(folder / "history.csv", sim.history.round_rows())
