r"""The command line's own syntax: ``--set KEY=VALUE``, ``--param KEY=SPEC``
and the ``pyg-fedgraph run`` command that reproduces a set of settings.
Light on imports: Optuna and the package load only when called."""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pyg_fedgraph.experiment.settings import key_value

__all__ = ["key_value", "parse_distribution", "run_command"]


def parse_distribution(text: str) -> Any:
    r"""Parses the CLI's ``--param NAME=SPEC`` specification.

    ``LOW:HIGH`` is uniform (integers if both bounds are integers),
    ``LOW:HIGH:log`` log-uniform, ``LOW:HIGH:STEP`` discretized, and a JSON
    list ``[a, b, c]`` categorical.

    Examples:
        ``"0.5:2"`` -> ``FloatDistribution(0.5, 2.0)``;
        ``"1e-3:1e-1:log"`` -> log-uniform float;
        ``"3:7"`` -> ``IntDistribution(3, 7)``;
        ``"[1, 2, 4, 8]"`` -> ``CategoricalDistribution((1, 2, 4, 8))``.
    """
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
    text = text.strip()
    if text.startswith("["):
        try:
            choices = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"categorical choices {text!r} are not a JSON list: {err}") from None
        if not isinstance(choices, list) or not choices:
            raise ValueError(f"categorical choices {text!r} must be a non-empty list")
        return CategoricalDistribution(tuple(choices))
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"distribution {text!r}: expected LOW:HIGH, LOW:HIGH:log, "
                         f"LOW:HIGH:STEP or a JSON list [a, b, ...]")
    try:
        bounds = [json.loads(p) for p in parts[:2]]
    except json.JSONDecodeError:
        raise ValueError(f"distribution {text!r}: bounds must be numbers") from None
    if not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds):
        raise ValueError(f"distribution {text!r}: bounds must be numbers")
    low, high = bounds
    if low > high:
        raise ValueError(f"distribution {text!r}: low {low} exceeds high {high}")
    integer = isinstance(low, int) and isinstance(high, int)
    log_scale, step = False, None
    if len(parts) == 3:
        if parts[2].strip().lower() == "log":
            log_scale = True
        else:
            try:
                step = json.loads(parts[2])
            except json.JSONDecodeError:
                step = None
            if not isinstance(step, (int, float)) or isinstance(step, bool) or step <= 0:
                raise ValueError(f"distribution {text!r}: the third field must be 'log' or "
                                 f"a positive step")
            integer = integer and isinstance(step, int)
    if log_scale and low <= 0:
        raise ValueError(f"distribution {text!r}: a log scale needs low > 0")
    if integer:
        return IntDistribution(low, high, log=log_scale, step=step or 1)
    return FloatDistribution(float(low), float(high), log=log_scale,
                             step=None if step is None else float(step))


def run_command(settings: Mapping[str, Any], overrides: Mapping[str, Any]) -> str:
    r"""The ``pyg-fedgraph run`` command of a study's trial: its settings
    (an :class:`~pyg_fedgraph.experiment.ExperimentConfig` as a dict) and its
    ``--set`` keys. The flag syntax lives here, with the parser."""
    from pyg_fedgraph.experiment.settings import ExperimentConfig, options

    flags = [f"--dataset {settings['dataset']}", f"--strategy {settings['strategy']}",
             f"--rounds {settings['rounds']}", f"--seed {settings['seed']}"]
    for option in options("run"):  # the other settings of a run, as its options
        if option.owner is not ExperimentConfig or option.name in (
                "dataset", "strategy", "rounds", "seed", "overrides"):
            continue
        if option.name in settings and settings[option.name] != option.default:
            flags.append(f"{option.flag} {settings[option.name]}")
    flags += [f"--set {k}={json.dumps(v) if not isinstance(v, str) else v}"
              for k, v in overrides.items()]
    return "pyg-fedgraph run " + " ".join(flags)
