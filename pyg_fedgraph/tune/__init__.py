r"""Hyper-parameter studies with `Optuna <https://optuna.org>`_.

Every paper of the project tunes its server's hyper-parameters on a grid
(pFedGraph :math:`\alpha, \lambda`; FedAGHN the initial :math:`p, q`;
Panacea :math:`\lambda_d` and the learning rates; FedCEDAR :math:`K, P`).
Here one Optuna trial is one simulated federation:

* the search space is declared next to each strategy
  (:meth:`Strategy.search_space <pyg_fedgraph.strategies.Strategy.search_space>`),
  as a dict of ``--set`` keys, so it may hold constructor options and
  local-training keys (``lr``) alike; users replace single parameters
  (``params``), fix some (``config.overrides``, the CLI's ``--set``), add the
  local learning rate (``tune_local``) or pass their own ``space``;
* :class:`TuneObjective` runs the federation round by round, reports the
  mean *validation* metric after every evaluated round (``trial.report``)
  so that pruners stop bad trials early, and returns the best mean
  validation metric. The test metric is never optimized: it is recorded as
  the trial's user attribute ``test_at_best_val``, measured at the round of
  best validation (the papers' protocol, :meth:`History.test_at_best
  <pyg_fedgraph.simulation.History.test_at_best>`);
* :func:`create_study` opens a persistent study (``sqlite:///study.db`` by
  default) that can be resumed and shared: several worker processes, on one
  machine or several, call :func:`tune` with the same storage and study
  name, Optuna's documented way to distribute a study.

Concurrency on SQLite: :func:`make_storage` gives SQLite connections a 60 s
busy timeout, so concurrent writers wait for the file lock instead of
failing with "database is locked"; this is enough for a few local workers
(trials last seconds to minutes, writes take milliseconds). For many workers
use a server database (``postgresql://...``) or Optuna's journal file
(a storage path ending in ``.log``), which needs no database server and
suits network file systems.

This is the orchestration layer: it builds runs with
:mod:`pyg_fedgraph.experiment` and never prints; the CLI
(``pyg-fedgraph tune``) prints.
"""
from pyg_fedgraph.tune.objective import TuneObjective
from pyg_fedgraph.tune.report import RunCommand, study_summary, write_study
from pyg_fedgraph.tune.space import SearchSpace, suggest_overrides
from pyg_fedgraph.tune.study import (
    PRUNERS,
    create_study,
    default_study_name,
    make_pruner,
    make_storage,
    tune,
)

__all__ = ["TuneObjective", "SearchSpace", "suggest_overrides", "make_storage", "make_pruner",
           "create_study", "default_study_name", "tune", "study_summary", "write_study",
           "RunCommand", "PRUNERS"]
