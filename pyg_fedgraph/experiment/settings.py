r"""Every setting of a run, declared once.

Three dataclasses hold them:

* :class:`ExperimentConfig`: what defines one run (data, strategy, model,
  federation, robustness, where it computes). Its :meth:`~ExperimentConfig.to_dict`
  is what run records and checkpoints are keyed by.
* :class:`RunOptions`: how ``pyg-fedgraph run`` carries runs out (several
  strategies and seeds, checkpoints, trackers, the output folder, resuming).
* :class:`TuneOptions`: the options of ``pyg-fedgraph tune``.

Each field declares its type (a ``Literal`` gives the choices), its range
(``Annotated[..., Range(...)]``), its default and its help text
(:func:`setting`). The command line's options, the config-file schema, the
``--set`` help and the resolved ``config.yaml`` of a run are generated from
these declarations (:func:`options`, :func:`file_keys`), so a new setting is
one field here (see CONTRIBUTING.md). ``--set`` keys are declared where they
act: :class:`~pyg_fedgraph.train.LocalConfig` (local training) and
:class:`~pyg_fedgraph.simulation.SimulatorConfig` (the simulator), plus the
model's, the dataset's and the strategy's own options.

The module imports no torch: ``--help`` reads it.
"""
from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pyg_fedgraph.catalog import MODEL_NAMES
from pyg_fedgraph.hparams import HParam, Range, parse_text, schema
from pyg_fedgraph.simulation.config import DropoutRate, Rounds
from pyg_fedgraph.typing import AttackName, PartitionName, Precision, RejectPolicy, TrackerName

__all__ = ["ExperimentConfig", "RunOptions", "TuneOptions", "Option", "setting", "options",
           "file_keys", "CONFIG_SCHEMA", "LOG_LEVELS", "parse_overrides", "key_value"]

Command = Literal["run", "tune"]
#: ``--log-level`` choices.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def setting(default: Any = dataclasses.MISSING, help: str | Mapping[str, str] = "", *,
            factory: Callable[[], Any] | None = None, flag: str | None = None,
            metavar: str | None = None, commands: Sequence[Command] = ("run", "tune"),
            file: bool = True, resume: bool = False, cli_default: Any = dataclasses.MISSING,
            parse: Callable[[str], Any] | None = None, since: int = 1) -> Any:
    r"""A declared setting (a dataclass field).

    Args:
        default: its default value.
        help (str or dict): its help text, or one per command.
        factory (callable, optional): a default factory instead (lists, dicts).
        flag (str, optional): its command-line option (default:
            ``--name-with-dashes``).
        metavar (str, optional): the value's name in ``--help``.
        commands (tuple): the commands that take it (default: both).
        file (bool): a config file may hold it (default: :obj:`True`).
        resume (bool): it may be given with ``--resume`` (default: :obj:`False`).
        cli_default: the option's default when it differs from the field's
            (:obj:`None` where "not given" must be told apart).
        parse (callable, optional): how the option's text is read.
        since (int): the version of the record format it joined. Settings
            added after run records exist leave :meth:`ExperimentConfig.to_dict`
            while at their default, so that the keys of earlier records stay.
    """
    meta = {"setting": True, "help": help, "flag": flag, "metavar": metavar,
            "commands": tuple(commands), "file": file, "resume": resume,
            "cli_default": cli_default, "parse": parse, "since": since}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def _seed_list(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds expects integers separated by commas, got "
                                         f"{text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"--seeds expects distinct integers >= 0, got {text!r}")
    return seeds


def _log_level(text: str) -> str:
    level = text.strip().upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"invalid log level {text!r}; choose one of "
                                         f"{', '.join(LOG_LEVELS)}")
    return level


def key_value(text: str) -> tuple[str, str]:
    r"""``"lr=0.1"`` -> ``("lr", "0.1")``."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--set expects key=value, got {text!r}")
    k, v = text.split("=", 1)
    return k.strip(), v.strip()


def _param_spec(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--param expects key=spec, got {text!r}")
    k, v = text.split("=", 1)
    return k.strip(), v.strip()


def _set_help() -> str:
    r"""The ``--set`` help, from the declarations of the keys it reaches."""
    from pyg_fedgraph.simulation.config import SIM_KEYS
    from pyg_fedgraph.train.config import LOCAL_SCHEMA

    return ("override a setting: local training (" + ", ".join(LOCAL_SCHEMA) + "), the "
            "simulator (" + ", ".join(SIM_KEYS) + "), model.<arg> (an option of the model), "
            "data.<arg> (an option of the dataset), or an option of the strategy")


# ------------------------------------------------------------------ settings
@dataclass
class ExperimentConfig:
    r"""Everything that defines one run, checked on construction against its
    declared types and ranges (the same declarations the command line and
    config files read).

    ``overrides`` (the command line's ``--set key=value``) are routed by key
    (:func:`~pyg_fedgraph.experiment.route_overrides`): local-training keys
    (:class:`~pyg_fedgraph.train.LocalConfig`), simulator keys
    (:class:`~pyg_fedgraph.simulation.SimulatorConfig`), ``model.<arg>``,
    ``data.<arg>`` for the dataset builder, and anything else goes to the
    strategy's constructor; each value is checked against the declaration of
    the option it reaches.
    """
    dataset: str = setting("digits", {
        "run": "dataset name, listed below (default: digits; without --dataset, the default "
               "job: digits over 40 clients in 5 label groups, 20 rounds)",
        "tune": "dataset name, listed below (default: digits)"},
        metavar="NAME", cli_default=None)
    strategy: str = setting("fedavg", {
        "run": "strategy name, or several separated by commas (default: "
               "local,fedavg,fedavg-ft,pfedgraph)",
        "tune": "strategy name (required here or in --config)"},
        metavar="NAME[,NAME...]", cli_default=None)
    model: str | None = setting(None, "client model: " + ", ".join(MODEL_NAMES)
                                + " (default: the dataset's); its options with --set "
                                  "model.<arg>=VALUE", metavar="NAME", since=2)
    rounds: Rounds | None = setting(None, {
        "run": "communication rounds (>= 1); with --resume, the total to reach",
        "tune": "communication rounds of every trial (>= 1)"}, resume=True)
    clients: Annotated[int | None, Range(ge=1)] = setting(None, "number of clients")
    partition: PartitionName | None = setting(None, "how labels are split over clients")
    beta: Annotated[float | None, Range(gt=0.0)] = setting(
        None, "Dirichlet concentration (--partition dirichlet)")
    classes_per_client: Annotated[int | None, Range(ge=1)] = setting(
        None, "classes per client of the pathological split")
    seed: Annotated[int, Range(ge=0)] = setting(0, "seed of data, model and training")
    novel_clients: Annotated[float, Range(ge=0.0, lt=1.0)] = setting(
        0.0, "fraction of clients held out of training and evaluated as novel",
        commands=("run",))
    overrides: dict[str, Any] = setting(
        factory=dict, help={"run": "", "tune": "fix a setting (as for run); never tuned"},
        flag="--set", metavar="KEY=VALUE", parse=key_value, file=False)
    attack: AttackName | None = setting(
        None, "malicious clients' attack: model poisoning (shuffle, same-value, sign-flip, "
              "gaussian: pFedGraph; scaled-negative: Panacea) or data poisoning (label-flip, "
              "backdoor); metrics are then over benign clients and summary.json has "
              "test_benign", commands=("run",))
    attack_ratio: Annotated[float, Range(gt=0.0, lt=1.0)] = setting(
        0.4, "share of malicious clients, in (0, 1) (default: 0.4, pFedGraph Table 3)",
        commands=("run",))
    dropout: DropoutRate = setting(
        0.0, "probability in [0, 1) that a sampled client returns nothing in a round",
        commands=("run",))
    reject_policy: RejectPolicy = setting(
        "drop", "bad uploads (NaN/Inf, wrong length, absurd norm): drop them with a logged "
                "reason (default) or stop with an error", commands=("run",))
    device: str = setting("auto", "auto (CUDA when available), cpu, cuda, cuda:N or mps "
                                  "(default: auto)", metavar="DEVICE", resume=True)
    threads: Annotated[int | None, Range(ge=1)] = setting(
        None, "torch's intra-op threads (default: 1 on the CPU, much faster for small "
              "models on a machine shared with other jobs; torch's choice when "
              "OMP_NUM_THREADS is set or on a GPU)", metavar="N", resume=True)
    precision: Precision = setting(
        "fp32", "autocast precision of local training and evaluation; parameters and "
                "aggregation stay float32 (default: fp32)")

    def __post_init__(self) -> None:
        for name, hp in CONFIG_SCHEMA.items():
            if name != "overrides":
                setattr(self, name, hp.check(getattr(self, name)))
        if not isinstance(self.overrides, dict):
            raise ValueError(f"overrides must be a dict of --set keys, got "
                             f"{type(self.overrides).__name__}")

    def to_dict(self) -> dict[str, Any]:
        r"""The settings by name, as records and checkpoints keep them: a
        setting added after the first records (``since`` > 1) is left out
        while at its default, so that earlier records keep their keys."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.metadata.get("since", 1) == 1 or getattr(self, f.name) != f.default}

    @classmethod
    def from_args(cls, args: argparse.Namespace | Mapping[str, Any], **changes: Any
                  ) -> ExperimentConfig:
        r"""The configuration of parsed options (an :class:`argparse.Namespace`
        or a mapping): every field the options hold, ``--set`` pairs parsed
        (:func:`parse_overrides`), then ``changes``. Options left at
        :obj:`None` where the field has another default take that default."""
        values = dict(vars(args)) if isinstance(args, argparse.Namespace) else dict(args)
        out: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in values:
                continue
            value = values[f.name]
            if f.name == "overrides":
                value = parse_overrides(value)
            elif value is None and f.default is not None:
                continue
            out[f.name] = value
        out.update(changes)
        return cls(**out)


#: The declared fields of :class:`ExperimentConfig`.
CONFIG_SCHEMA: dict[str, HParam] = schema(ExperimentConfig)


def parse_overrides(pairs: Sequence[tuple[str, Any]] | Mapping[str, Any] | None
                    ) -> dict[str, Any]:
    r"""``--set`` pairs (or a map of them) as a dict, text values parsed as the
    command line does (:func:`~pyg_fedgraph.hparams.parse_text`); the last
    pair of a key wins."""
    items = pairs.items() if isinstance(pairs, Mapping) else (pairs or ())
    return {k: parse_text(v) if isinstance(v, str) else v for k, v in items}


@dataclass
class RunOptions:
    r"""How ``pyg-fedgraph run`` carries runs out (not part of a run's
    identity: a run record's key does not depend on them)."""
    config: Path | None = setting(
        None, "a YAML file of settings (the long option names, and a 'set' map of --set keys); "
              "options given on the command line win, --set keys over the file's; a run's "
              "own config.yaml reruns it", metavar="FILE", file=False)
    seeds: list[int] | None = setting(
        None, "run every strategy once per seed and report the mean and standard deviation "
              "over them (instead of --seed)", metavar="S[,S...]", parse=_seed_list,
        commands=("run",))
    checkpoint_every: Annotated[int, Range(ge=0)] = setting(
        0, "also write the whole run state to <out>/checkpoint.pt every K rounds "
           "(atomically); 0 (the default): only at the end of each run and when it is "
           "stopped (Ctrl-C)", metavar="K", commands=("run",), resume=True)
    resume: Path | None = setting(
        None, "continue the run (or the comparison) in DIR with its saved settings, writing "
              "to the same outputs; only --rounds (the total to reach), --checkpoint-every, "
              "--device, --threads, --deterministic, --quiet and --log-level may be given",
        metavar="DIR", commands=("run",), file=False)
    out: Path | None = setting(None, {
        "run": "output directory (default: runs/<dataset>-<time>); refused if it holds a run, "
               "unless --overwrite",
        "tune": "where best.json and the plots go (default: runs/tune-<study>)"}, file=False)
    overwrite: bool = setting(False, "replace the run already in --out (its files only)",
                              commands=("run",), file=False)
    save_models: bool = setting(
        False, "also save every client's final personalized model to <run>/models.pt "
               "(tensors only: torch.load(weights_only=True))", commands=("run",))
    tracker: list[TrackerName] = setting(
        factory=list, help="also log to TensorBoard (event files in <out>/<run>) or MLflow (the "
                           "store <out>/mlflow.db); extras 'tensorboard', 'mlflow'; repeat for "
                           "both")
    deterministic: bool = setting(
        False, "torch's deterministic algorithms only (reproducible CUDA runs, slower; CPU "
               "runs are reproducible anyway)", resume=True)
    quiet: bool = setting(False, "no progress bar or per-round lines", file=False,
                          resume=True)
    log_level: str = setting("WARNING", f"one of {', '.join(LOG_LEVELS)} (default: WARNING)",
                             parse=_log_level, file=False, resume=True)

    def __post_init__(self) -> None:
        for name, hp in schema(RunOptions).items():
            setattr(self, name, hp.check(getattr(self, name), f"--{name.replace('_', '-')}"))

    @classmethod
    def from_args(cls, args: argparse.Namespace | Mapping[str, Any]) -> RunOptions:
        r"""The options of parsed arguments (those it holds)."""
        values = dict(vars(args)) if isinstance(args, argparse.Namespace) else dict(args)
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})


@dataclass
class TuneOptions:
    r"""The options of ``pyg-fedgraph tune`` (an Optuna study of one strategy)."""
    n_trials: int = setting(1, "trials this process adds", commands=("tune",),
                            cli_default=None)
    storage: str = setting("sqlite:///study.db",
                           "Optuna storage: a database URL or the path of a journal file "
                           "ending in .log (default: sqlite:///study.db)", commands=("tune",),
                           file=False)
    study_name: str | None = setting(None, "default: <strategy>-<dataset>[-<partition>]",
                                     commands=("tune",), file=False)
    pruner: Literal["median", "hyperband", "none"] = setting(
        "median", "stops unpromising trials early (default: median)", commands=("tune",))
    params: list[tuple[str, str]] = setting(
        factory=list, help="tune KEY over SPEC instead of the strategy's range: LOW:HIGH, "
                           "LOW:HIGH:log, LOW:HIGH:STEP or a JSON list of choices",
        flag="--param", metavar="KEY=SPEC", parse=_param_spec, commands=("tune",), file=False)
    tune_local: bool = setting(False, "also tune the local learning rate lr",
                               commands=("tune",))
    sampler_seed: int | None = setting(None, "seed of the TPE sampler (give each worker its "
                                             "own)", commands=("tune",), file=False)
    timeout: float | None = setting(None, "stop starting trials after this many seconds",
                                    commands=("tune",), file=False)


# ------------------------------------------------------------------ options
@dataclass(frozen=True)
class Option:
    r"""One declared setting as a command-line option (see :func:`options`)."""
    name: str
    owner: type
    flag: str
    annotation: Any
    default: Any
    help: str
    metavar: str | None
    choices: tuple[Any, ...] | None
    parse: Callable[[str], Any] | None
    kind: Literal["flag", "value", "append"]
    file: bool
    resume: bool

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        r"""Adds this option to ``parser`` (an :mod:`argparse` parser)."""
        kwargs: dict[str, Any] = {"dest": self.name, "help": self.help or None}
        if self.kind == "flag":
            kwargs.update(action="store_true", default=bool(self.default))
        else:
            kwargs.update(default=[] if self.kind == "append" else self.default,
                          metavar=self.metavar)
            if self.kind == "append":
                kwargs["action"] = "append"
            if self.choices is not None:
                kwargs["choices"] = self.choices
                kwargs.pop("metavar")
            if self.parse is not None:
                kwargs["type"] = self.parse
            elif self.choices is None:
                kwargs["type"] = _scalar_type(self.annotation)
        parser.add_argument(self.flag, **kwargs)


def type_arms(annotation: Any) -> tuple[Any, ...]:
    if get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(a for a in get_args(annotation) if a is not type(None))
    return (annotation,)


def _scalar_type(annotation: Any) -> Callable[[str], Any]:
    arm = type_arms(annotation)[0]
    return arm if arm in (int, float, str, Path) else str


def _choices(annotation: Any) -> tuple[Any, ...] | None:
    arms = type_arms(annotation)
    if get_origin(arms[0]) is list:
        arms = type_arms(get_args(arms[0])[0])
    if len(arms) == 1 and get_origin(arms[0]) is Literal:
        return get_args(arms[0])
    return None


def options(command: Command) -> list[Option]:
    r"""The declared settings of ``command`` (``"run"`` or ``"tune"``) as
    command-line options, in declaration order."""
    owners: tuple[type, ...] = (ExperimentConfig, RunOptions) + (
        (TuneOptions,) if command == "tune" else ())
    out = []
    for owner in owners:
        hints = typing.get_type_hints(owner)
        for f in fields(owner):
            meta = f.metadata
            if not meta.get("setting") or command not in meta["commands"]:
                continue
            annotation = schema(owner)[f.name].annotation if f.name in schema(owner) \
                else hints[f.name]
            default = (f.default if f.default is not dataclasses.MISSING
                       else f.default_factory())  # type: ignore[operator]
            if meta["cli_default"] is not dataclasses.MISSING:
                default = meta["cli_default"]
            help_text = meta["help"]
            if isinstance(help_text, Mapping):
                help_text = help_text.get(command, "")
            if f.name == "overrides" and not help_text:
                help_text = _set_help()
            base = type_arms(annotation)[0]
            kind: Literal["flag", "value", "append"] = (
                "flag" if base is bool else
                "append" if get_origin(base) is list and meta["parse"] is not _seed_list
                or f.name == "overrides" else "value")
            out.append(Option(f.name, owner, meta["flag"] or "--" + f.name.replace("_", "-"),
                              annotation, default, help_text, meta["metavar"],
                              _choices(annotation), meta["parse"], kind, meta["file"],
                              meta["resume"]))
    return out


def file_keys(command: Command = "run") -> tuple[str, ...]:
    r"""The keys a config file of ``command`` may hold: the declared settings
    marked ``file`` (``strategy`` may be a list, ``seeds`` a list), plus
    ``set`` (a map of ``--set`` keys) and ``provenance`` (written by runs,
    ignored when read)."""
    return (*(o.name for o in options(command) if o.file), "set", "provenance")
