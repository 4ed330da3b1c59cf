"""Checks for the lessons' exercises: the learner's code, run for real, against crashes and races.

A learner answers a "build" exercise by writing one function in a notebook cell. The check
does not read the code: it runs it, in fresh child processes or on a fresh database, against
the events the lesson is about: a SIGKILL at the worst moment, a second worker racing the
first, a run that went back to an earlier step. A shortcut (a constant, an empty function,
the naive draft the lesson took apart) fails the check, and ``tests/lab/test_exercises.py``
proves it. Notebooks call the checks as ``labkit.lab.exercises.<name>(...)``: the names
below are the ones they (and the tests) use.

One module per lesson, named after its notebook (``lessonNN_<stem>.py`` holds the checks
of ``notebooks/NN_<stem>.ipynb``), and one runner that every lesson shares:

- :mod:`.runner`: running an answer in a child (killed before a helper, or paused for a
  race), the scratch workspaces and killed runs a check starts from, and the feedback:
  one-line failures, the blank answer's "waiting for your answer", and the refusals of
  what is not the learner's own function;
- :mod:`.lesson02_three_states`: a compare-and-set UPDATE, raced by a stale worker;
- :mod:`.lesson03_durable_checkpoint`: the three restart questions, at every crash point;
- :mod:`.lesson04_rollback`: evidence and step in one transaction, killed between them;
- :mod:`.lesson05_crash_and_reread`: a recovery worker, from every crash point;
- :mod:`.lesson06_single_receipt`: completion raced by three workers, one receipt;
- :mod:`.lesson07_evidence_contract`: a contract rule for counts that contradict each other;
- :mod:`.lesson08_versioning`: a migration rule from workflow version 1 to 2;
- :mod:`.lesson09_external_effects`: the reconciliation decision, against a real ticket service;
- :mod:`.lesson10_leases_and_fencing`: the fenced commit's condition;
- :mod:`.lesson11_capacity_and_retention`: which raw diagnostics a retention may remove;
- :mod:`.lesson12_crash_explorer`: one scenario by hand, and a prediction of a bug's damage;
- :mod:`.lesson13_evaluation`: the task scorecard's accuracy;
- :mod:`.lesson14_choosing_an_engine`: a DBOS step that runs at least once; a LangGraph ticket node
  killed right after its send.

How a check is built: ``check_<what>(answer)`` is wrapped in :func:`~.runner.one_line`
(the feedback is an ``AssertionError`` that Jupyter shows as one line); it starts with
:func:`~.runner.clear_trials`; it refuses what is not an answer before running anything
(:func:`~.runner.answer_is_a_function`, :func:`~.runner.source_of`) and an answer that hands
the job to the labkit code the check compares with (:func:`~.runner.own_work`); then it runs
the answer against the lesson's events (:func:`~.runner.run_answer_once` in a child,
:func:`~.runner.killed_at` for what a killed run left, :func:`~.runner.new_trial` for a
fresh workspace) and compares the rows with what labkit's own code leaves. It prints a
``✓`` line for each claim that holds, and otherwise raises ``AssertionError`` with a hint.
A helper two lessons need lives in the runner; a lesson's module holds only its own.
"""

from .lesson02_three_states import check_compare_and_set
from .lesson03_durable_checkpoint import check_restart_answers
from .lesson04_rollback import check_single_transaction_inspect
from .lesson05_crash_and_reread import check_recovery_worker
from .lesson06_single_receipt import check_idempotent_completion
from .lesson07_evidence_contract import RuleCheckedProvider, check_contract_rule, inspect_with_rule
from .lesson08_versioning import check_migration_rule
from .lesson09_external_effects import check_reconciliation, reconciliation_trials
from .lesson10_leases_and_fencing import check_fenced_commit
from .lesson11_capacity_and_retention import check_retention_selection, retention_case
from .lesson12_crash_explorer import check_bug_prediction, check_scenario
from .lesson13_evaluation import check_task_accuracy, evaluation_cases
from .lesson14_choosing_an_engine import check_evidence_step, check_ticket_node, evidence_step_trial, ticket_node_trial
from .runner import ANSWER_NAMESPACE, waiting_for

__all__ = [
    "ANSWER_NAMESPACE",
    "RuleCheckedProvider",
    "check_bug_prediction",
    "check_compare_and_set",
    "check_contract_rule",
    "check_evidence_step",
    "check_fenced_commit",
    "check_idempotent_completion",
    "check_migration_rule",
    "check_reconciliation",
    "check_recovery_worker",
    "check_restart_answers",
    "check_retention_selection",
    "check_scenario",
    "check_single_transaction_inspect",
    "check_task_accuracy",
    "check_ticket_node",
    "evaluation_cases",
    "evidence_step_trial",
    "inspect_with_rule",
    "reconciliation_trials",
    "retention_case",
    "ticket_node_trial",
    "waiting_for",
]
