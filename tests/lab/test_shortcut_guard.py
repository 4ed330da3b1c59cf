"""The one shortcut guard every exercise uses: labkit's own code is refused under any name.

A learner who answers "write the migration rule" with labkit's rule has learnt nothing, and
a check that compares with labkit's rule would pass it. The guard compares by identity what
the answer is and what it reaches (globals, closures, defaults, the learner's own helpers),
not the name it was given; what is built only at run time is caught while the answer runs.
"""

from __future__ import annotations

import functools

import pytest

import labkit
import labkit.leases
import labkit.versioning
from labkit.lab.exercises.runner import own_work, refuse_if_called, watching_labkit

my_rule = labkit.versioning.why_not
my_fence = labkit.leases.FENCE
from labkit.versioning import why_not as renamed  # noqa: E402 - the shortcut being tested


def through_a_global(*args):
    return my_rule(*args)


def through_an_alias(*args):
    return renamed(*args)


def my_helper(*args):
    return my_rule(*args)


def through_my_helper(*args):
    return my_helper(*args)


def through_a_default(conn, incident, step, to_version, rule=labkit.versioning.why_not):
    return rule(conn, incident, step, to_version)


def through_an_inner_import(*args):
    from labkit.versioning import why_not

    return why_not(*args)


def through_an_attribute(*args):
    return labkit.versioning.why_not(*args)


def closing_over(rule):
    def answer(*args):
        return rule(*args)

    return answer


def built_at_run_time(*args):
    return getattr(labkit.versioning, "why" + "_not")(*args)


def honest(conn, incident, step, to_version):
    """An answer of the learner's own (a wrong one: the guard does not judge correctness)."""
    return None


SHORTCUTS = {
    "labkit's function itself": my_rule,
    "a partial of it": functools.partial(labkit.versioning.why_not),
    "a global alias": through_a_global,
    "an import under another name": through_an_alias,
    "a helper of the learner's that calls it": through_my_helper,
    "a default argument": through_a_default,
    "an import inside the answer": through_an_inner_import,
    "an attribute path": through_an_attribute,
    "a closure": closing_over(labkit.versioning.why_not),
}


@pytest.mark.parametrize("answer", SHORTCUTS.values(), ids=SHORTCUTS.keys())
def test_labkits_rule_under_any_name_is_refused(answer):
    with pytest.raises(AssertionError, match="write it yourself"):
        own_work(answer, "why_not")


def test_any_labkit_function_as_the_answer_is_refused_even_one_the_check_did_not_name():
    with pytest.raises(AssertionError, match="not a function of yours"):
        own_work(labkit.connect, "why_not")


def test_labkits_constant_under_another_name_is_refused():
    with pytest.raises(AssertionError, match="labkit's own"):
        own_work(my_fence, "FENCE")


def test_the_learners_own_function_passes_the_guard():
    own_work(honest, "why_not")
    own_work("version = :expected_version", "FENCE")


def test_a_name_built_at_run_time_is_caught_while_the_answer_runs_and_labkits_own_calls_are_not():
    own_work(built_at_run_time, "why_not")  # nothing to see before it runs
    with watching_labkit("why_not") as calls:
        with pytest.raises(TypeError):
            built_at_run_time()  # called with the wrong arguments: the call is still seen
    with pytest.raises(AssertionError, match="labkit.versioning.why_not"):
        refuse_if_called(calls)
    assert labkit.versioning.why_not is my_rule, "the original is put back"
    with watching_labkit("why_not") as calls:
        honest(None, "INC-1", None, 2)
    refuse_if_called(calls)


import contextlib  # noqa: E402
import types  # noqa: E402 - the shortcuts below are a learner's, kept beside their tests

copied = types.FunctionType(labkit.versioning.why_not.__code__, globals())
KEPT = {"rule": labkit.versioning.why_not}


class Rules:
    rule = staticmethod(labkit.versioning.why_not)


def through_a_dict(*args):
    return KEPT["rule"](*args)


def through_a_class(*args):
    return Rules.rule(*args)


def test_labkits_code_copied_into_a_new_function_is_refused():
    with pytest.raises(AssertionError, match="copied into a new function"):
        own_work(copied, "why_not")


@pytest.mark.parametrize("answer", [through_a_dict, through_a_class], ids=["kept in a dict", "kept in a class"])
def test_labkits_rule_kept_where_the_guard_does_not_look_is_caught_while_it_runs(answer):
    own_work(answer, "why_not")  # a dict's value or a class's attribute is not followed by name
    with watching_labkit("why_not") as calls:
        with contextlib.suppress(Exception):
            answer(None, "INC-1", None, 2)  # whatever labkit's rule makes of it, its call is seen
    with pytest.raises(AssertionError, match="labkit.versioning.why_not"):
        refuse_if_called(calls)


def test_a_checks_own_helper_called_by_the_answer_is_caught():
    from labkit.lab.exercises import lesson07_evidence_contract as checks

    def answer():
        return checks.prediction_answers(b'{"diagnosis": {}}')

    with watching_labkit() as calls:
        with contextlib.suppress(Exception):
            answer()
    with pytest.raises(AssertionError, match="the check's own code"):
        refuse_if_called(calls)
