"""``convmem eval ... --resolver module:factory`` with a LangChain ``LLMResolver``.

A user with a real model points the factory at it; here the model is a fake that
never gives a structured answer, so every turn shows the wiring end to end: each
resolve asks the chat model, fails, is counted, and falls back to the rules, so the
score is the rule resolver's own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lc_fakes import EVAL_RESOLVERS

from convmem.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"
ARGS = ["eval", str(DATA / "crm_dev.jsonl"), "--domains", str(DATA / "domains"), "--json"]


def test_eval_runs_the_factorys_resolver(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(ARGS) == 0
    rules = json.loads(capsys.readouterr().out)
    EVAL_RESOLVERS.clear()
    assert main([*ARGS, "--resolver", "lc_fakes:eval_resolver"]) == 0
    with_llm = json.loads(capsys.readouterr().out)
    [resolver] = EVAL_RESOLVERS
    model = resolver.chat_model
    assert len(model.received) == resolver.failures >= rules["turns"]  # type: ignore[attr-defined]
    assert with_llm["turns_fully_correct"] == rules["turns_fully_correct"]


def test_bad_factory_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--resolver", "lc_fakes"]) == 2
    assert "expected module:factory" in capsys.readouterr().err
    assert main([*ARGS, "--resolver", "lc_fakes:no_such_factory"]) == 2
    assert "no_such_factory" in capsys.readouterr().err
