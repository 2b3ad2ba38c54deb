"""The ledger: the truth about jobs and money.

The operations and their meaning are written once (``core.py``); what differs between engines
(connection, transactions, migrations, time, dialect) lives beside them, one module per backend,
as ``afc_cli/storage/`` does for where outputs go. Every ``from afc_cli.ledger import X`` names
what this module re-exports.
"""

from afc_cli.ledger.core import (
    ACTIVE,
    JOB_COST_SQL,
    MAX_TAKEOVERS,
    SHARED_BUDGET,
    TERMINAL,
    AdmitResult,
    BudgetExhausted,
    JobLost,
    Ledger,
    OutputBusy,
    OutputHeld,
    ProviderBusy,
    ReviewRace,
    open_ledger,
    read_admitted,
    spool_holder_of,
    spool_root_of,
)

__all__ = [
    "ACTIVE",
    "JOB_COST_SQL",
    "MAX_TAKEOVERS",
    "SHARED_BUDGET",
    "TERMINAL",
    "AdmitResult",
    "BudgetExhausted",
    "JobLost",
    "Ledger",
    "OutputBusy",
    "OutputHeld",
    "ProviderBusy",
    "ReviewRace",
    "open_ledger",
    "read_admitted",
    "spool_holder_of",
    "spool_root_of",
]
