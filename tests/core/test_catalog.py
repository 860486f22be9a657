"""Name matching (spec §8–9): names, aliases, case, typos, longest match."""

from __future__ import annotations

import pytest

from convmem import Domain, Entity, InMemoryCatalog


def ids(domain: Domain, text: str) -> list[list[str]]:
    return [[e.id for e in m.candidates] for m in domain.catalog.find(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Pull up Brightwater Farms.", [["C-1080"]]),
        ("pull up BRIGHTWATER farms", [["C-1080"]]),
        ("Can you pull up Northline's account?", [["C-1042", "C-1043", "C-1044"]]),
        ("What's going on with Northline Foods?", [["C-1042", "C-1043"]]),  # longest match wins
        ("And Harbor Health?", [["C-1051"]]),
        ("What were Redwood Analytics' orders?", [["C-1082"]]),
        ("Marlow & Finch", [["C-1100"]]),
        ("Is the Stratus license up?", [["P-207"]]),
        ("Tell me about O-4478.", [["O-4478"]]),
        ("Pull up Brightwatr Farms", [["C-1080"]]),  # one typo
        ("Pull up Kestrel Aerospase", [["C-1084"]]),
        ("Pull up Krestel Aerospace", [["C-1084"]]),  # distance 2 on a long label
        ("Pull up Xrightwater Farms", []),  # first letter must be right
        # issue 13: a typo of a whole label extends the exact alias its first words are
        ("How is Harbor Helth Partners doing?", [["C-1051"]]),  # not the ambiguous "Harbor"
        ("What did Pinecrest Clinic order last month?", [["C-1094"]]),
        ("Is Brightwater Farsm on the list?", [["C-1080"]]),  # distance 2, 16+ characters
        ("Pull the Apex Dental Lab numbers", [["C-1071"]]),  # not both "Apex Dental" customers
        ("Northline Fods", [["C-1042", "C-1043"]]),  # the two Foods, not all three Northlines
        ("how is ben crter doing", [["R-08"]]),  # the typo is not in the first word
        ("Elm Court or Northline Foods?", [["C-1042", "C-1043"]]),
        ("How is the weather?", []),
    ],
)
def test_find(crm: Domain, text: str, expected: list[list[str]]) -> None:
    assert ids(crm, text) == expected


def test_typo_tie_is_ambiguous() -> None:
    cat = InMemoryCatalog([Entity("c", "1", "Hollis Park"), Entity("c", "2", "Hollis Bark")])
    [m] = cat.find("how is hollis dark")
    assert {e.id for e in m.candidates} == {"1", "2"} and m.kind == "typo"


def test_full_label_beats_shared_alias() -> None:
    cat = InMemoryCatalog([
        Entity("p", "1", "Vento", aliases=("Vento",)),
        Entity("p", "2", "Vento X4", aliases=("Vento",)),
    ])
    assert [[e.id for e in m.candidates] for m in cat.find("the Vento")] == [["1"]]


def test_catalog_protocol_is_async_too(crm: Domain) -> None:
    import asyncio

    found = asyncio.run(crm.catalog.afind("Pull up Brightwater Farms"))
    assert found[0].candidates[0].id == "C-1080"
