"""A run's spend as it happens, held to ``costs.budget_usd``.

The estimate is checked once, before the run starts; what the calls really cost is known only as
they are committed (an answer longer than the plan assumed, a resume that finds fewer cache hits).
The driver prices each committed batch's calls as the ledger will (its generations and role calls,
read back from the batch's parts) and adds what the run's deployments have held so far; a run
whose spend crosses the budget stops there (``OverBudget``: status ``over_budget``), its committed
work kept, and resumes under a raised budget. Batches already in flight when it stops are the most
it can go over by."""

from __future__ import annotations

from collections.abc import Callable

from halluscope.cost.ledger import CallTally, calls_usd
from halluscope.errors import OverBudget
from halluscope.pipeline.resolved import ResolvedRun
from halluscope.storage.run import RunStore

_GENERATION_COLUMNS = ["model", "task", "cached", "error", "input_tokens", "output_tokens"]
_ROLE_CALL_COLUMNS = ["role_model", "task", "stage", "calls", "cached_calls", "failed_calls", "input_tokens",
                      "output_tokens"]


class BudgetWatch:
    """``committed(key)`` after each batch commits; raises ``OverBudget`` once the spend crosses
    the budget. ``held_usd``: what the run's deployments have held so far, in dollars."""

    def __init__(self, run: ResolvedRun, store: RunStore, budget_usd: float, held_usd: Callable[[], float | None]
                 ) -> None:
        self.run, self.store, self.budget_usd, self.held_usd = run, store, budget_usd, held_usd
        self.tally = CallTally(run.cfg.models)
        self.services = {m: s.name for s in run.cfg.costs.shared_services for m in s.models}
        self.spent = 0.0

    def committed(self, key: str, parts: dict[str, str]) -> None:
        """``parts``: table -> the name of the batch's part in it (a batch without role calls
        writes no role_calls part)."""
        for table, columns, add in (("generations", _GENERATION_COLUMNS, self.tally.add_generations),
                                    ("role_calls", _ROLE_CALL_COLUMNS, self.tally.add_role_calls)):
            rows = self.store.read_part(table, parts[table], columns) if table in parts else None
            if rows is not None:
                add(rows)
        calls = calls_usd(self.tally, self.run.cfg.models, self.run.prices, self.services)
        self.spent = calls + (self.held_usd() or 0.0)
        if self.spent > self.budget_usd:
            raise OverBudget(f"costs.budget_usd ${self.budget_usd:,.2f} crossed: ${self.spent:,.2f} spent so far "
                             f"(calls ${calls:,.2f}, deployments ${self.spent - calls:,.2f}); the committed work is "
                             "kept: raise the budget and resume the run")

