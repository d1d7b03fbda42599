"""What a simulated federation recorded, round by round and client by client."""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

__all__ = ["History", "RoundRecord", "Protocol", "PROTOCOLS", "Ties", "TIES",
           "TIE_WARNING_SHARE"]

log = logging.getLogger(__name__)

#: How the reported test metric is chosen from the evaluated rounds (see :class:`History`).
Protocol = Literal["best-round", "per-client-best"]
PROTOCOLS: tuple[str, ...] = ("best-round", "per-client-best")
#: Which of the rounds tied at a client's best validation value ``"per-client-best"`` takes.
Ties = Literal["earliest", "latest"]
TIES: tuple[str, ...] = ("earliest", "latest")
#: ``"per-client-best"`` logs a warning when at least this share of the reported clients
#: (and at least one) has its best validation value in rounds whose test values differ.
TIE_WARNING_SHARE = 0.1


@dataclass
class RoundRecord:
    r"""One evaluated round.

    Attributes:
        round (int): 1-based round number.
        train_loss (float): mean local training loss of the sampled clients.
        val (dict): metric name -> per-client validation values :math:`(N,)`.
        test (dict): metric name -> per-client test values :math:`(N,)`.
        seconds (float): wall time of the round (training + evaluation).
        num_sampled (int): clients that trained this round.
        extra (dict): further per-round figures (name -> float).
        pending (torch.Tensor, optional): the clients whose test values were
            not evaluated this round :math:`(N,)` bool (their ``test``
            values are NaN; ``Simulator(test_at="best")``); ``None``: all were.

    The metric tensors are kept on the CPU, whatever device computed them, so
    that a history's records stack (and a resumed run's records join those of
    its checkpoint).
    """
    round: int
    train_loss: float
    val: dict[str, Tensor]
    test: dict[str, Tensor]
    seconds: float
    num_sampled: int
    extra: dict[str, float] = field(default_factory=dict)
    pending: Tensor | None = None

    def __post_init__(self) -> None:
        self.val = {k: v.detach().cpu() for k, v in self.val.items()}
        self.test = {k: v.detach().cpu() for k, v in self.test.items()}
        if self.pending is not None:
            self.pending = self.pending.detach().cpu()


class History:
    r"""Per-round and per-client record of a run, and the two rules the
    papers use to turn it into one test number.

    * ``"best-round"`` (the default): the mean over clients of the test
      metric at the one round of best *mean* validation metric
      (:attr:`best_round`). This is what the papers' text describes
      (pFedGraph, Appendix C.1.2: "we average the results on each local
      validation set and save the best model"; FedAGHN, Sec. 4.2).
    * ``"per-client-best"``: every client keeps the test metric of *its own*
      best validation round, and the mean of those is reported
      (:meth:`per_client_best_index`). This is what pFedGraph's released code
      computes (``test.py``: each client's best test accuracy is replaced
      whenever its own validation accuracy strictly improves), so its tables
      follow this rule. It is usually a little higher than ``"best-round"``
      (each client picks its round on its own validation data, so the
      selection also fits the validation noise), but it can be lower.

    Ties go to the earliest round and a NaN validation value never wins, in
    both rules; under ``"per-client-best"`` a client without any validation
    value is left out of the mean.

    **Ties under "per-client-best".** A client's validation metric on
    :math:`n` samples moves in steps of :math:`1/n`, so with a small
    validation split it reaches its best value in many rounds. The earliest
    of them is kept (``ties="earliest"``), as pFedGraph's ``test.py`` does
    (a client's kept test accuracy is replaced only when its validation
    accuracy is strictly higher than its best so far) and as checkpointing on
    improvement does; ``ties="latest"`` keeps the last one. Neither chooses
    anything when the validation split is this small: with 2 validation
    samples per client (FedCEDAR's case study, 60 clients, 50 rounds) the
    earliest tied rounds are the first few (test 0.651) and the latest are
    the last ones, which merely repeats the last round (0.946, as
    ``test_final``). When at least :data:`TIE_WARNING_SHARE` (10%) of the
    reported clients, and at least one, have tied rounds with different test
    values, the choice is the tie rule's, not the validation's: a warning is
    logged with both values (use ``"best-round"``, whose mean over clients
    rarely ties, or larger validation splits).

    Args:
        metric (str): the primary metric name (``accuracy``, ``mse`` ...).
        higher_is_better (bool): its direction.
        eval_clients (torch.Tensor, optional): the clients whose mean is
            reported (default: all); e.g. the benign ones under attack.
    """

    def __init__(self, metric: str, higher_is_better: bool,
                 eval_clients: Tensor | None = None) -> None:
        self.metric = metric
        self.higher_is_better = higher_is_better
        self.eval_clients = eval_clients
        self.records: list[RoundRecord] = []
        # Number of records when the tie warning was last logged (logged once per state).
        self._tie_warning_at = -1

    def append(self, record: RoundRecord) -> None:
        self.records.append(record)

    def __len__(self) -> int:
        return len(self.records)

    # ---------------------------------------------------------------- means
    def _mean(self, values: Tensor) -> float:
        v = self._reported(values)
        v = v[~torch.isnan(v)]
        return float(v.mean()) if v.numel() else math.nan

    def mean(self, split: str, metric: str | None = None) -> list[float]:
        r"""Mean over clients of ``metric`` on ``split``, one value per record
        (NaN for the test split of a round that did not evaluate it for every
        reported client: :attr:`RoundRecord.pending`)."""
        m = metric or self.metric
        return [self._record_mean(r, split, m) for r in self.records]

    def _record_mean(self, record: RoundRecord, split: str, metric: str) -> float:
        if split == "test" and record.pending is not None and bool(
                self._reported(record.pending).any()):
            return math.nan
        return self._mean(getattr(record, split)[metric])

    def _reported(self, values: Tensor) -> Tensor:
        r"""The entries of per-client ``values`` :math:`(N,)` of the clients
        whose mean is reported (``eval_clients``, default all)."""
        return values if self.eval_clients is None else values[self.eval_clients.cpu()]

    @property
    def rounds(self) -> list[int]:
        return [r.round for r in self.records]

    @property
    def best_index(self) -> int:
        r"""Index of the record with the best mean validation metric (the
        earliest one on ties; NaN never wins)."""
        if not self.records:
            raise ValueError("the history is empty")
        vals = self.mean("val")
        sign = 1.0 if self.higher_is_better else -1.0
        scored = [(sign * v if not math.isnan(v) else -math.inf, -i) for i, v in enumerate(vals)]
        return -max(scored)[1]

    @property
    def best_round(self) -> int:
        return self.records[self.best_index].round

    def per_client_best_index(self, ties: Ties = "earliest") -> Tensor:
        r"""For every client, the index of the record with its own best
        validation metric :math:`(N,)` (on ties the earliest such record, or
        the latest with ``ties="latest"``; NaN never wins; :obj:`-1` for a
        client without any validation value)."""
        if not self.records:
            raise ValueError("the history is empty")
        if ties not in TIES:
            raise ValueError(f"unknown ties {ties!r}; choose one of {TIES}")
        val = torch.stack([r.val[self.metric].double() for r in self.records])  # (R, N)
        sign = 1.0 if self.higher_is_better else -1.0
        score = (sign * val).nan_to_num(nan=-math.inf, posinf=math.inf, neginf=-math.inf)
        # argmax returns the first maximum: the earliest round, or the latest one when
        # the rounds are read backwards.
        best = (score.argmax(dim=0) if ties == "earliest"
                else score.size(0) - 1 - score.flip(0).argmax(dim=0))
        return torch.where(torch.isnan(val).all(dim=0), -1, best)

    def _per_client_best(self, split: str, metric: str | None = None,
                         ties: Ties = "earliest") -> Tensor:
        r"""Each client's ``metric`` on ``split`` at its own best validation
        round :math:`(N,)`, NaN where it has none."""
        index = self.per_client_best_index(ties)
        values = torch.stack([getattr(r, split)[metric or self.metric].double()
                              for r in self.records])  # (R, N)
        picked = values.gather(0, index.clamp(min=0).unsqueeze(0)).squeeze(0)
        return torch.where(index >= 0, picked, math.nan)

    def _warn_on_ties(self) -> None:
        r"""Logs (once per state of the history) when the tie rule, not the
        validation metric, chooses the round of many clients (see the class
        docstring)."""
        if self._tie_warning_at == len(self.records):
            return
        first = self.per_client_best_index("earliest")
        last = self.per_client_best_index("latest")
        test_first = self._per_client_best("test", ties="earliest")
        test_last = self._per_client_best("test", ties="latest")
        decided = (first != last) & (test_first != test_last) & ~torch.isnan(test_first)
        # Where the latest tied round's test value was not evaluated (test_at="best"),
        # it may differ: counted, but it gives no "latest" figure.
        unknown = decided & self._not_evaluated(last)
        reported = torch.ones_like(decided) if self.eval_clients is None else \
            torch.zeros_like(decided).index_fill_(0, self.eval_clients.cpu(), True)
        decided &= reported
        num, of = int(decided.sum()), int((reported & (first >= 0)).sum())
        if num == 0 or num < TIE_WARNING_SHARE * of:
            return
        self._tie_warning_at = len(self.records)
        val = torch.stack([r.val[self.metric].double() for r in self.records])
        best = val.gather(0, first.clamp(min=0).unsqueeze(0))
        tied_rounds = (val == best).sum(dim=0)[decided]
        latest = (f"the latest would give {self._mean(test_last):.4f}"
                  if not bool((unknown & reported).any()) else
                  "the latest's test values were not evaluated (test_at='best')")
        log.warning(
            "per-client-best: %d of %d clients reach their best validation %s in several "
            "rounds (a median of %d of %d evaluated rounds) with different test values, as a "
            "small validation split does; each keeps its earliest such round (pFedGraph's "
            "rule): test %.4f; %s. The validation does not choose "
            "here: prefer protocol 'best-round' or larger validation splits",
            num, of, self.metric, int(tied_rounds.median()), len(self.records),
            self._mean(test_first), latest)

    def _not_evaluated(self, index: Tensor) -> Tensor:
        r"""Which clients' test value at their record ``index`` :math:`(N,)`
        was not evaluated :math:`(N,)` bool (:attr:`RoundRecord.pending`:
        ``Simulator(test_at="best")`` before its
        :meth:`~pyg_fedgraph.simulation.Simulator.complete_test`)."""
        out = torch.zeros(index.numel(), dtype=torch.bool)
        for j in set(index.tolist()):
            pending = self.records[j].pending if j >= 0 else None
            if pending is not None:
                out |= (index == j) & pending
        return out

    def test_at_best(self, metric: str | None = None,
                     protocol: Protocol = "best-round", ties: Ties = "earliest") -> float:
        r"""The reported test value of ``metric`` (default: the primary one)
        under ``protocol`` (see the class docstring); ``ties`` is the tie rule
        of ``"per-client-best"``, which logs a warning when ties decide it."""
        if protocol == "best-round":
            return self.mean("test", metric)[self.best_index]
        if protocol == "per-client-best":
            value = self._mean(self._per_client_best("test", metric, ties))
            if bool(self._reported(self._not_evaluated(self.per_client_best_index(ties))).any()):
                return math.nan  # a client's value is owed: not the mean of the others
            self._warn_on_ties()
            return value
        raise ValueError(f"unknown protocol {protocol!r}; choose one of {PROTOCOLS}")

    def summary(self, protocol: Protocol = "best-round",
                ties: Ties = "earliest") -> dict[str, Any]:
        r"""Key numbers under ``protocol``: ``metric``, ``test`` (the reported
        test value), ``test_final`` (last round), ``val_best`` (the
        validation value that chose it), ``best_round`` (``None`` for
        ``"per-client-best"``, where every client has its own) and
        ``rounds``. ``"per-client-best"`` also gives ``protocol`` and
        ``ties`` (its tie rule, see the class docstring)."""
        if protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {protocol!r}; choose one of {PROTOCOLS}")
        if not self.records:
            return {"metric": self.metric, "rounds": 0}
        out = {"metric": self.metric, "higher_is_better": self.higher_is_better}
        if protocol == "best-round":
            b = self.best_index
            out.update(test=self.mean("test")[b], test_final=self.mean("test")[-1],
                       val_best=self.mean("val")[b], best_round=self.records[b].round)
        else:
            out.update(test=self.test_at_best(protocol=protocol, ties=ties),
                       test_final=self.mean("test")[-1],
                       val_best=self._mean(self._per_client_best("val", ties=ties)),
                       best_round=None, protocol=protocol, ties=ties)
        out["rounds"] = self.records[-1].round
        return out

    # ------------------------------------------------------------- tables
    def round_rows(self) -> list[dict[str, Any]]:
        r"""One row per evaluated round (for ``history.csv``)."""
        rows = []
        for r in self.records:
            row: dict[str, Any] = {"round": r.round, "train_loss": r.train_loss,
                                   "num_sampled": r.num_sampled, "seconds": r.seconds}
            for split in ("val", "test"):
                for name in getattr(r, split):
                    row[f"{split}_{name}"] = self._record_mean(r, split, name)
            row.update(r.extra)
            rows.append(row)
        return rows

    def client_rows(self) -> list[dict[str, Any]]:
        r"""One row per client: metrics at the best round and at the last one."""
        if not self.records:
            return []
        best, last = self.records[self.best_index], self.records[-1]
        n = next(iter(best.test.values())).numel()
        rows = []
        for i in range(n):
            row: dict[str, Any] = {"client": i}
            for tag, rec in (("best", best), ("final", last)):
                for split in ("val", "test"):
                    for name, vals in getattr(rec, split).items():
                        row[f"{split}_{name}_{tag}"] = float(vals[i])
            rows.append(row)
        return rows

    def state_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "higher_is_better": self.higher_is_better,
                "records": [vars(r).copy() for r in self.records]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.metric = state["metric"]
        self.higher_is_better = state["higher_is_better"]
        self.records = [RoundRecord(**r) for r in state["records"]]
        self._tie_warning_at = -1

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, History) or len(self) != len(other):
            return False
        for a, b in zip(self.records, other.records, strict=True):
            same_loss = a.train_loss == b.train_loss or (math.isnan(a.train_loss)
                                                         and math.isnan(b.train_loss))
            if a.round != b.round or not same_loss:
                return False
            for split in ("val", "test"):
                da, db = getattr(a, split), getattr(b, split)
                if da.keys() != db.keys() or not all(
                        torch.equal(da[k].nan_to_num(-1.0), db[k].nan_to_num(-1.0)) for k in da):
                    return False
        return True

    def __repr__(self) -> str:
        if not self.records:
            return f"{self.__class__.__name__}(empty)"
        s = self.summary()
        return (f"{self.__class__.__name__}(rounds={s['rounds']}, {self.metric}: "
                f"test={s['test']:.4f} at round {s['best_round']}, final={s['test_final']:.4f})")
