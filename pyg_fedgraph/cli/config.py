r"""Config files of the command line: ``pyg-fedgraph run --config exp.yaml``.

A config file holds the options of ``run`` (their long names with
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
into a typed schema (:class:`RunFile`), so an unknown key or a value of the
wrong type is one line naming the key and the file; the values then go
through the same checks as the flags (:class:`~pyg_fedgraph.experiment.
ExperimentConfig`, :func:`~pyg_fedgraph.experiment.route_overrides`).
Flags given on the command line win over the file, ``--set`` keys over the
file's ``set``.

Every run writes its *resolved* config as ``config.yaml``: the settings it
ran with, defaults filled in (rounds, clients, the model and its arguments,
local training, every strategy option, simulator settings), without an
output folder, plus a ``provenance`` section (versions, device, git commit,
data checksum) that is informational and ignored when the file is read back.
``pyg-fedgraph run --config runs/X/config.yaml --out runs/Y`` reruns run X.
"""
from __future__ import annotations

import hashlib
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from pyg_fedgraph.data import FederatedDataset
    from pyg_fedgraph.experiment import ExperimentConfig
    from pyg_fedgraph.simulation import Simulator

__all__ = ["RunFile", "load_config", "flatten_set", "resolved_config", "provenance",
           "data_checksum", "dump_yaml", "CONFIG_NAME"]

#: The resolved config a run writes into its folder.
CONFIG_NAME = "config.yaml"


# OmegaConf reads Optional[...] and builtin generics; Literal and Annotated
# ranges are checked afterwards by ExperimentConfig (one schema for both).
@dataclass
class RunFile:
    r"""The keys of a config file (see the module docstring)."""
    dataset: str = "digits"
    strategy: Optional[Any] = None  # noqa: UP045 - OmegaConf reads typing.Optional
    rounds: Optional[int] = None  # noqa: UP045 - OmegaConf reads typing.Optional
    clients: Optional[int] = None  # noqa: UP045 - OmegaConf reads typing.Optional
    partition: Optional[str] = None  # noqa: UP045 - OmegaConf reads typing.Optional
    beta: Optional[float] = None  # noqa: UP045 - OmegaConf reads typing.Optional
    classes_per_client: Optional[int] = None  # noqa: UP045 - OmegaConf reads typing.Optional
    seed: int = 0
    seeds: Optional[list[int]] = None  # noqa: UP045 - OmegaConf reads typing.Optional
    novel_clients: float = 0.0
    attack: Optional[str] = None  # noqa: UP045 - OmegaConf reads typing.Optional
    attack_ratio: float = 0.4
    dropout: float = 0.0
    reject_policy: str = "drop"
    checkpoint_every: int = 0
    device: str = "auto"
    threads: Optional[int] = None  # noqa: UP045 - OmegaConf reads typing.Optional
    precision: str = "fp32"
    deterministic: bool = False
    tracker: list[str] = field(default_factory=list)
    save_models: bool = False
    set: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)


#: The keys a config file may hold.
FILE_KEYS = tuple(f.name for f in fields(RunFile))


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
    :class:`RunFile` (``set`` flattened to ``--set`` keys; ``provenance``
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
    try:
        merged = OmegaConf.merge(OmegaConf.structured(RunFile), loaded)
        container = OmegaConf.to_container(merged, resolve=True)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "?"
        message = str(err).splitlines()[0]
        raise ValueError(f"--config {path}: key {key!r}: {message}") from None
    except TypeError:  # a list where the schema has a map, or the reverse
        wrong = [k for k, v in loaded.items() if k in FILE_KEYS
                 and OmegaConf.is_list(v) != OmegaConf.is_list(getattr(RunFile(), str(k)))
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
def resolved_config(sim: Simulator, cfg: ExperimentConfig, *, checkpoint_every: int = 0,
                    deterministic: bool = False, trackers: Sequence[str] = (),
                    save_models: bool = False) -> dict[str, Any]:
    r"""The settings of one finished run with every default filled in, as a
    config file holds them (no output folder), plus its provenance."""
    from pyg_fedgraph.experiment import dataset_options, resolved_model

    data = sim.dataset
    model_name, model_kwargs = resolved_model(cfg, data)
    overrides = dict(cfg.overrides)
    resolved: dict[str, Any] = {k: v for k, v in overrides.items()
                                if k.startswith("data.")}
    local = sim.trainer.config
    resolved.update({"lr": local.lr, "momentum": local.momentum,
                     "weight_decay": local.weight_decay, "batch_size": local.batch_size,
                     "epochs": local.epochs, "steps": local.steps,
                     "model": model_name})
    resolved.update(local.optional_set())
    resolved.update({f"model.{k}": v for k, v in model_kwargs.items()})
    resolved.update({"sample_fraction": sim.sample_fraction, "eval_every": sim.eval_every,
                     "parallel": sim.parallel, "execution": sim.execution,
                     "parallel_clients": sim.parallel_clients})
    for key in ("state_device", "compile"):
        if key in overrides:
            resolved[key] = overrides[key]
    resolved.update(sim.strategy.hparams())
    # The dataset's own defaults, pinned where its builder takes them.
    takes = dataset_options(cfg.dataset)
    partition = data.info.get("partition")
    return {
        "dataset": cfg.dataset, "strategy": cfg.strategy, "rounds": sim.rounds,
        "clients": data.num_clients if "num_clients" in takes else cfg.clients,
        "partition": partition if "partition" in takes and isinstance(partition, str)
        else cfg.partition,
        "beta": cfg.beta, "classes_per_client": cfg.classes_per_client, "seed": cfg.seed,
        "novel_clients": cfg.novel_clients, "attack": cfg.attack,
        "attack_ratio": cfg.attack_ratio, "dropout": cfg.dropout,
        "reject_policy": cfg.reject_policy, "checkpoint_every": checkpoint_every,
        "device": cfg.device, "threads": cfg.threads, "precision": cfg.precision,
        "deterministic": deterministic, "tracker": list(trackers), "save_models": save_models,
        "set": resolved, "provenance": provenance(data, sim),
    }
