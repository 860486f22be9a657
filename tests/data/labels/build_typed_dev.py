"""Hand-written labels for the typed-reference and generalisation dev sessions (issue 13).

Every ``expect`` below was derived by hand from docs/session-state-spec.md §1-§10, turn
by turn, before the sessions were replayed; this file only spells them compactly. Run
from the repository root to rewrite tests/data/typed_dev.jsonl and gaps_dev.jsonl.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def kind(type_: str) -> Callable[[str], tuple[str, str]]:
    """``C = kind("customer")``; ``C("C-1080")`` is ``("customer", "C-1080")``."""

    def make(id_: str) -> tuple[str, str]:
        return (type_, id_)

    return make


def tool(name: str, args: dict[str, Any], data: Any, ok: bool = True) -> dict[str, Any]:
    return {"name": name, "args": args, "result": {"ok": ok, "data": data}}

def rec(i: str, n: str) -> dict[str, str]:
    return {"id": i, "name": n}

def T(user: str, tools: Any = (), focus: tuple[str, str] | None = None,
      filters: dict[str, str] | None = None, fmt: str | None = None, clarify: bool = False,
      options: Any = (), rc: Any = (), salient: Any = (), tags: Any = ()) -> dict[str, Any]:
    e = {"focus": None if focus is None else {"type": focus[0], "id": focus[1]},
         "filters": dict(filters or {}), "format": fmt, "clarify": clarify,
         "rewritten_contains": list(rc), "salient": [{"type": t, "id": i} for t, i in salient]}
    if clarify:
        e["options"] = list(options)
    d = {"user": user, "tools": list(tools), "expect": e}
    if tags:
        d["tags"] = list(tags)
    return d

def S(sid: str, domain: str, turns: list[dict[str, Any]], today: str = "2026-11-30") -> dict[str, Any]:
    return {"id": sid, "domain": domain, "today": today, "turns": turns}

X = ("cross_type",)
C = kind("customer")
R = kind("rep")
O = kind("order")  # noqa: E741
P = kind("product")
BW = tool("lookup_customer", {"name": "Brightwater Farms"}, rec("C-1080", "Brightwater Farms"))
BEN = tool("lookup_rep", {"customer_id": "C-1080"}, rec("R-08", "Ben Carter"))
Q3 = {"period": "2026-Q3"}

typed = [
 S("typed-001", "crm_typed", [
   T("Pull up Brightwater Farms.", [BW], C("C-1080"), rc=["Brightwater Farms"]),
   T("Who's their rep?", [BEN], R("R-08"), rc=["Brightwater Farms"], salient=[C("C-1080")]),
   T("What did they order last quarter?", [tool("list_orders", {"customer_id": "C-1080", "period": "2026-Q3"}, [{"id": "O-4438", "status": "overdue"}])],
     C("C-1080"), Q3, rc=["Brightwater Farms"], salient=[R("R-08")], tags=X),
   T("Has he chased them about it?", [], R("R-08"), Q3, rc=["Ben Carter", "Brightwater Farms"], salient=[C("C-1080")], tags=X),
   T("Draft a short note he can send them.", [], R("R-08"), Q3, rc=["Ben Carter", "Brightwater Farms"], salient=[C("C-1080")], tags=X),
   T("What's his phone number?", [], R("R-08"), rc=["Ben Carter"], salient=[C("C-1080")]),
 ]),
 S("typed-002", "crm_typed", [
   T("Tell me about O-4431.", [tool("get_order", {"id": "O-4431"}, {"id": "O-4431", "customer_id": "C-1081", "status": "shipped"})], O("O-4431"), rc=["O-4431"]),
   T("Which customer placed it?", [tool("lookup_customer", {"order_id": "O-4431"}, rec("C-1081", "Cobalt Freight"))], C("C-1081"), rc=["O-4431"], salient=[O("O-4431")]),
   T("Are they behind on payments?", [], C("C-1081"), rc=["Cobalt Freight"], salient=[O("O-4431")]),
   T("When is that order due to ship?", [], O("O-4431"), rc=["O-4431"], salient=[C("C-1081")], tags=X),
   T("Who's the rep on it?", [tool("lookup_rep", {"order_id": "O-4431"}, rec("R-03", "Chris Lindqvist"))], R("R-03"), rc=["O-4431"], salient=[O("O-4431"), C("C-1081")]),
   T("Does he know the customer is unhappy?", [], R("R-03"), rc=["Chris Lindqvist", "Cobalt Freight"], salient=[O("O-4431"), C("C-1081")], tags=X),
   T("Briefly, what did they buy from us this year?", [], C("C-1081"), {"period": "2026"}, "short", rc=["Cobalt Freight"], salient=[R("R-03"), O("O-4431")], tags=X),
 ]),
 S("typed-003", "crm_typed", [
   T("What's the list price of the Relay Gateway?", [], P("P-212"), rc=["Relay Gateway"]),
   T("Which customers bought it this quarter?", [tool("list_orders", {"product_id": "P-212", "period": "2026-Q4"}, [{"id": "O-4442"}])], P("P-212"), {"period": "2026-Q4"}, rc=["Relay Gateway"]),
   T("Pull up Tidewater Marine.", [tool("lookup_customer", {"name": "Tidewater Marine"}, rec("C-1086", "Tidewater Marine"))], C("C-1086"), {"period": "2026-Q4"}, rc=["Tidewater Marine"], salient=[P("P-212")]),
   T("How many units of that product did they take?", [], P("P-212"), {"period": "2026-Q4"}, rc=["Relay Gateway", "Tidewater Marine"], salient=[C("C-1086")], tags=X),
   T("Is it still under warranty?", [], P("P-212"), rc=["Relay Gateway"], salient=[C("C-1086")]),
   T("What's their account number?", [], C("C-1086"), rc=["Tidewater Marine"], salient=[P("P-212")], tags=X),
 ]),
 S("typed-004", "crm_typed", [
   T("Show me Meridian Hotels.", [tool("lookup_customer", {"name": "Meridian Hotels"}, rec("C-1083", "Meridian Hotels"))], C("C-1083"), rc=["Meridian Hotels"]),
   T("Who's their account manager?", [tool("lookup_rep", {"customer_id": "C-1083"}, rec("R-07", "Sofia Rossi"))], R("R-07"), rc=["Meridian Hotels"], salient=[C("C-1083")]),
   T("How do I reset my password for the expense tool?", [], None),
   T("Did they renew last year?", [], None, {"period": "2025"}, tags=("after_topic_change",)),
   T("Pull up Orchid Pharma.", [tool("lookup_customer", {"name": "Orchid Pharma"}, rec("C-1088", "Orchid Pharma"))], C("C-1088"), {"period": "2025"}, rc=["Orchid Pharma"]),
   T("Who looks after them?", [tool("lookup_rep", {"customer_id": "C-1088"}, rec("R-01", "Priya Nair"))], R("R-01"), {"period": "2025"}, rc=["Orchid Pharma"], salient=[C("C-1088")]),
 ]),
 S("typed-005", "crm_typed", [
   T("Pull up O-4464.", [tool("get_order", {"id": "O-4464"}, {"id": "O-4464", "status": "overdue"})], O("O-4464"), rc=["O-4464"]),
   T("Who was the customer on it?", [tool("lookup_customer", {"order_id": "O-4464"}, rec("C-1083", "Meridian Hotels"))], C("C-1083"), rc=["O-4464"], salient=[O("O-4464")]),
   T("And who's their rep?", [tool("lookup_rep", {"customer_id": "C-1083"}, rec("R-07", "Sofia Rossi"))], R("R-07"), rc=["Meridian Hotels"], salient=[C("C-1083"), O("O-4464")]),
   T("Has she been told the order is late?", [], R("R-07"), rc=["Sofia Rossi", "O-4464"], salient=[C("C-1083"), O("O-4464")], tags=X),
   T("What's its total?", [], C("C-1083"), rc=["Meridian Hotels"], salient=[R("R-07"), O("O-4464")], tags=X),
   T("Show that order in a table.", [], O("O-4464"), fmt="table", rc=["O-4464"], salient=[C("C-1083"), R("R-07")], tags=X),
 ]),
 S("typed-006", "crm_typed", [
   T("Has Chris sold any Keel tablets this year?", [], None, clarify=True, options=["R-02", "R-03"]),
   T("The one based in Stockholm.", [tool("lookup_rep", {"name": "Chris Lindqvist"}, rec("R-03", "Chris Lindqvist")),
                                     tool("list_orders", {"rep_id": "R-03", "product_id": "P-209", "period": "2026"}, [{"id": "O-4497"}])],
     R("R-03"), {"period": "2026"}, rc=["Chris Lindqvist", "Keel"]),
   T("Which customers bought Keel tablets from him?", [], P("P-209"), {"period": "2026"}, rc=["Keel", "Chris Lindqvist"], salient=[R("R-03")], tags=X),
   T("Was Ironclad Security one of them?", [tool("lookup_customer", {"name": "Ironclad Security"}, rec("C-1092", "Ironclad Security"))], C("C-1092"), {"period": "2026"}, rc=["Ironclad Security"], salient=[P("P-209"), R("R-03")]),
   T("Did he close their last order himself?", [], R("R-03"), rc=["Chris Lindqvist", "Ironclad Security"], salient=[C("C-1092"), P("P-209")], tags=X),
   T("Pull up O-4497.", [tool("get_order", {"id": "O-4497"}, {"id": "O-4497"})], O("O-4497"), rc=["O-4497"], salient=[R("R-03"), C("C-1092")]),
 ]),
 S("typed-007", "crm_typed", [
   T("Look up Granite Peak Bank.", [tool("lookup_customer", {"name": "Granite Peak Bank"}, rec("C-1089", "Granite Peak Bank"))], C("C-1089"), rc=["Granite Peak Bank"]),
   T("Who is the account manager for them?", [tool("lookup_rep", {"customer_id": "C-1089"}, rec("R-01", "Priya Nair"))], R("R-01"), rc=["Granite Peak Bank"], salient=[C("C-1089")]),
   T("Does the account manager know the account is overdue?", [], R("R-01"), {"status": "overdue"}, rc=["Priya Nair", "Granite Peak Bank"], salient=[C("C-1089")], tags=X),
   T("Send her a reminder about it, briefly.", [], R("R-01"), {"status": "overdue"}, "short", rc=["Priya Nair", "Granite Peak Bank"], salient=[C("C-1089")], tags=X),
   T("What is the company's credit limit?", [], C("C-1089"), {"status": "overdue"}, "short", rc=["Granite Peak Bank"], salient=[R("R-01")], tags=X),
 ]),
 S("typed-008", "crm_typed", [
   T("What's in O-4482?", [tool("get_order", {"id": "O-4482"}, {"id": "O-4482"})], O("O-4482"), rc=["O-4482"]),
   T("Which product is it?", [tool("lookup_product", {"order_id": "O-4482"}, rec("P-201", "Vento X2 Scanner"))], P("P-201"), rc=["O-4482"], salient=[O("O-4482")]),
   T("Who bought that order?", [tool("lookup_customer", {"order_id": "O-4482"}, rec("C-1095", "Sakura Electronics"))], C("C-1095"), rc=["O-4482"], salient=[O("O-4482"), P("P-201")], tags=X),
   T("Is the product still in stock?", [], P("P-201"), rc=["Vento X2 Scanner"], salient=[C("C-1095"), O("O-4482")], tags=X),
   T("When did it ship?", [], P("P-201"), rc=["Vento X2 Scanner"], salient=[C("C-1095"), O("O-4482")]),
   T("And their other orders?", [], C("C-1095"), rc=["Sakura Electronics"], salient=[P("P-201"), O("O-4482")], tags=X),
 ]),
 S("typed-009", "crm_typed", [
   T("Pull up Brightwater Farms.", [BW], C("C-1080"), rc=["Brightwater Farms"]),
   T("Who's their rep?", [BEN], R("R-08"), rc=["Brightwater Farms"], salient=[C("C-1080")]),
   T("Does he also cover Northline?", [], R("R-08"), clarify=True, options=["C-1042", "C-1043", "C-1044"], salient=[C("C-1080")]),
   T("The Chicago one.", [tool("lookup_customer", {"name": "Northline Foods", "city": "Chicago"}, rec("C-1043", "Northline Foods"))], C("C-1043"), rc=["Ben Carter", "Northline Foods"], salient=[R("R-08")]),
   T("What did they order in October?", [tool("list_orders", {"customer_id": "C-1043", "period": "2026-10"}, [])], C("C-1043"), {"period": "2026-10"}, rc=["Northline Foods"], salient=[R("R-08")]),
   T("Is he their rep, or someone else?", [], R("R-08"), {"period": "2026-10"}, rc=["Ben Carter", "Northline Foods"], salient=[C("C-1043")], tags=X),
 ]),
 S("typed-010", "crm_typed", [
   T("How is Redwood Analytics doing this quarter?", [tool("lookup_customer", {"name": "Redwood Analytics"}, rec("C-1082", "Redwood Analytics"))], C("C-1082"), {"period": "2026-Q4"}, rc=["Redwood Analytics"]),
   T("Which rep handles them?", [tool("lookup_rep", {"customer_id": "C-1082"}, rec("R-04", "Dana Whitfield"))], R("R-04"), {"period": "2026-Q4"}, rc=["Redwood Analytics"], salient=[C("C-1082")]),
   T("What's the weather like in Lisbon right now?", [], None, {"period": "2026-Q4"}),
   T("Does she have their renewal date?", [], None, tags=("after_topic_change",)),
   T("Pull up Dana Whitfield.", [tool("lookup_rep", {"name": "Dana Whitfield"}, rec("R-04", "Dana Whitfield"))], R("R-04"), rc=["Dana Whitfield"]),
   T("Which accounts does she cover?", [], R("R-04"), rc=["Dana Whitfield"]),
 ]),
 S("typed-011", "crm_typed", [
   T("Look up Solstice Energy.", [tool("lookup_customer", {"name": "Solstice Energy"}, rec("C-1090", "Solstice Energy"))], C("C-1090"), rc=["Solstice Energy"]),
   T("Show me their latest order.", [tool("get_order", {"customer_id": "C-1090", "latest": True}, {"id": "O-4471"})], O("O-4471"), rc=["Solstice Energy"], salient=[C("C-1090")]),
   T("Which rep booked it?", [tool("lookup_rep", {"order_id": "O-4471"}, rec("R-05", "Mateo Alvarez"))], R("R-05"), rc=["O-4471"], salient=[O("O-4471"), C("C-1090")]),
   T("What's the customer's payment history with him?", [], C("C-1090"), rc=["Solstice Energy", "Mateo Alvarez"], salient=[R("R-05"), O("O-4471")], tags=X),
   T("In a table, please.", [], C("C-1090"), fmt="table", rc=["Solstice Energy"], salient=[R("R-05"), O("O-4471")]),
   T("Has the order shipped?", [], O("O-4471"), {"status": "shipped"}, "table", rc=["O-4471"], salient=[C("C-1090"), R("R-05")], tags=X),
 ]),
 S("typed-012", "crm_typed", [
   T("Pull up Halcyon Studios.", [tool("lookup_customer", {"name": "Halcyon Studios"}, rec("C-1099", "Halcyon Studios"))], C("C-1099"), rc=["Halcyon Studios"]),
   T("Who is their rep?", [tool("lookup_rep", {"customer_id": "C-1099"}, rec("R-07", "Sofia Rossi"))], R("R-07"), rc=["Halcyon Studios"], salient=[C("C-1099")]),
   T("Did they buy any Quill Label Printers?", [], P("P-203"), rc=["Halcyon Studios", "Quill"], salient=[C("C-1099"), R("R-07")], tags=X),
   T("How many did she sell of those?", [], R("R-07"), rc=["Sofia Rossi"], salient=[P("P-203"), C("C-1099")], tags=X),
   T("Compare with Ben.", [], R("R-08"), rc=["Ben"], salient=[P("P-203"), C("C-1099")]),
 ]),
 S("typed-013", "crm_typed", [
   T("What's the margin on the Tern Handheld Terminal?", [], P("P-205"), rc=["Tern Handheld Terminal"]),
   T("Which customers are buying it right now?", [tool("list_orders", {"product_id": "P-205"}, [{"id": "O-4420"}, {"id": "O-4493"}])], P("P-205"), rc=["Tern Handheld Terminal"]),
   T("Pull up Summit Outdoor Co.", [tool("lookup_customer", {"name": "Summit Outdoor Co."}, rec("C-1060", "Summit Outdoor Co."))], C("C-1060"), rc=["Summit Outdoor Co"], salient=[P("P-205")]),
   T("How many of this product do they have?", [], P("P-205"), rc=["Tern Handheld Terminal", "Summit Outdoor Co"], salient=[C("C-1060")], tags=X),
   T("Is it due for a refresh?", [], P("P-205"), rc=["Tern Handheld Terminal"], salient=[C("C-1060")]),
   T("Who is their rep?", [tool("lookup_rep", {"customer_id": "C-1060"}, rec("R-08", "Ben Carter"))], R("R-08"), rc=["Summit Outdoor Co"], salient=[C("C-1060"), P("P-205")], tags=X),
 ]),
 S("typed-014", "crm_typed", [
   T("Look up Fernhill Schools.", [tool("lookup_customer", {"name": "Fernhill Schools"}, rec("C-1091", "Fernhill Schools"))], C("C-1091"), rc=["Fernhill Schools"]),
   T("Show me their last order.", [tool("get_order", {"customer_id": "C-1091", "latest": True}, {"id": "O-4520"})], O("O-4520"), rc=["Fernhill Schools"], salient=[C("C-1091")]),
   T("Did the rep ship it before their deadline?", [], O("O-4520"), rc=["O-4520", "Fernhill Schools"], salient=[C("C-1091")], tags=X),
   T("Who is the rep on it?", [tool("lookup_rep", {"order_id": "O-4520"}, rec("R-07", "Sofia Rossi"))], R("R-07"), rc=["O-4520"], salient=[O("O-4520"), C("C-1091")]),
   T("Has she spoken to the client?", [], R("R-07"), rc=["Sofia Rossi", "Fernhill Schools"], salient=[O("O-4520"), C("C-1091")], tags=X),
 ]),
]

PR = kind("property")
TN = kind("tenant")
MG = kind("manager")
WO = kind("work_order")
NOV = "2026-11-02..2026-11-08"
estates = [
 S("estates-001", "estates", [
   T("Pull up Harbourview Apartments.", [tool("lookup_property", {"name": "Harbourview Apartments"}, rec("PR-10", "Harbourview Apartments"))], PR("PR-10"), rc=["Harbourview Apartments"]),
   T("Any open repairs there?", [tool("list_work_orders", {"property_id": "PR-10", "status": "open"}, [{"id": "WO-506"}])], PR("PR-10"), {"status": "open"}, rc=["Harbourview Apartments"]),
   T("Show me WO-506.", [tool("get_work_order", {"id": "WO-506"}, {"id": "WO-506", "issue": "window"})], WO("WO-506"), {"status": "open"}, rc=["WO-506"], salient=[PR("PR-10")]),
   T("Which manager signed it off?", [tool("lookup_manager", {"work_order_id": "WO-506"}, rec("MG-1", "Grace Liu"))], MG("MG-1"), {"status": "open"}, rc=["WO-506"], salient=[WO("WO-506"), PR("PR-10")]),
   T("Has she visited the building since?", [], MG("MG-1"), rc=["Grace Liu", "Harbourview Apartments"], salient=[WO("WO-506"), PR("PR-10")], tags=X),
   T("When is the job due to finish?", [], WO("WO-506"), rc=["WO-506"], salient=[MG("MG-1"), PR("PR-10")], tags=X),
   T("Is it urgent?", [], WO("WO-506"), {"priority": "urgent"}, rc=["WO-506"], salient=[MG("MG-1"), PR("PR-10")]),
 ]),
 S("estates-002", "estates", [
   T("Look up the tenant Orla Byrne.", [tool("lookup_tenant", {"name": "Orla Byrne"}, rec("TN-201", "Orla Byrne"))], TN("TN-201"), rc=["Orla Byrne"]),
   T("Which property do they rent?", [tool("lookup_property", {"tenant_id": "TN-201"}, rec("PR-15", "Maple House"))], PR("PR-15"), rc=["Orla Byrne"], salient=[TN("TN-201")]),
   T("Who is the property manager for it?", [tool("lookup_manager", {"property_id": "PR-15"}, rec("MG-1", "Grace Liu"))], MG("MG-1"), rc=["Maple House"], salient=[PR("PR-15"), TN("TN-201")]),
   T("Has she met them about the damp?", [], MG("MG-1"), rc=["Grace Liu", "Orla Byrne"], salient=[PR("PR-15"), TN("TN-201")], tags=X),
   T("Are they behind on rent?", [], TN("TN-201"), rc=["Orla Byrne"], salient=[MG("MG-1"), PR("PR-15")], tags=X),
   T("What's the building's council tax band?", [], PR("PR-15"), rc=["Maple House"], salient=[TN("TN-201"), MG("MG-1")], tags=X),
 ]),
 S("estates-003", "estates", [
   T("How many open jobs does Riverside have?", [], None, clarify=True, options=["PR-13", "PR-14"]),
   T("I meant the one up in York, sorry.", [tool("list_work_orders", {"property_id": "PR-14", "status": "open"}, [{"id": "WO-507"}])], PR("PR-14"), {"status": "open"}, rc=["Riverside Mews"], tags=("gap:clarify_attr",)),
   T("Who manages it?", [tool("lookup_manager", {"property_id": "PR-14"}, rec("MG-2", "Owen Price"))], MG("MG-2"), {"status": "open"}, rc=["Riverside Mews"], salient=[PR("PR-14")]),
   T("Does he cover Canal Wharf as well?", [], PR("PR-16"), {"status": "open"}, rc=["Owen Price", "Canal Wharf"], salient=[MG("MG-2")]),
   T("What's his phone number?", [], MG("MG-2"), rc=["Owen Price"], salient=[PR("PR-16")], tags=X),
 ]),
 S("estates-004", "estates", [
   T("Show me WO-502.", [tool("get_work_order", {"id": "WO-502"}, {"id": "WO-502", "issue": "roof leak"})], WO("WO-502"), rc=["WO-502"]),
   T("Which building is it at?", [tool("lookup_property", {"work_order_id": "WO-502"}, rec("PR-11", "Elm Court"))], PR("PR-11"), rc=["WO-502"], salient=[WO("WO-502")]),
   T("Is the repair finished?", [], WO("WO-502"), rc=["WO-502"], salient=[PR("PR-11")], tags=X),
   T("What's the company policy on annual leave for staff?", [], None),
   T("When will it be fixed?", [], None, tags=("after_topic_change",)),
   T("Pull up Elm Court Annex.", [tool("lookup_property", {"name": "Elm Court Annex"}, rec("PR-12", "Elm Court Annex"))], PR("PR-12"), rc=["Elm Court Annex"]),
 ]),
 S("estates-005", "estates", [
   T("Look up Brightside Bakery.", [tool("lookup_tenant", {"name": "Brightside Bakery"}, rec("TN-204", "Brightside Bakery"))], TN("TN-204"), rc=["Brightside Bakery"]),
   T("Where is their shop?", [tool("lookup_property", {"tenant_id": "TN-204"}, rec("PR-16", "Canal Wharf"))], PR("PR-16"), rc=["Brightside Bakery"], salient=[TN("TN-204")]),
   T("Any urgent work orders for it?", [tool("list_work_orders", {"property_id": "PR-16", "priority": "urgent"}, [{"id": "WO-505"}])], PR("PR-16"), {"priority": "urgent"}, rc=["Canal Wharf"], salient=[TN("TN-204")]),
   T("Pull up WO-505.", [tool("get_work_order", {"id": "WO-505"}, {"id": "WO-505", "issue": "intercom"})], WO("WO-505"), {"priority": "urgent"}, rc=["WO-505"], salient=[PR("PR-16"), TN("TN-204")]),
   T("Did the tenant report it?", [], TN("TN-204"), {"priority": "urgent"}, rc=["Brightside Bakery", "WO-505"], salient=[WO("WO-505"), PR("PR-16")], tags=X),
   T("Is it still under warranty?", [], WO("WO-505"), rc=["WO-505"], salient=[TN("TN-204"), PR("PR-16")], tags=X),
 ]),
 S("estates-006", "estates", [
   T("Pull up Elm Court.", [tool("lookup_property", {"name": "Elm Court"}, rec("PR-11", "Elm Court"))], PR("PR-11"), rc=["Elm Court"]),
   T("Is Grace still managing it?", [], PR("PR-11"), clarify=True, options=["MG-1", "MG-3"]),
   T("The Manchester-based Grace, I think.", [tool("lookup_manager", {"name": "Grace Okoro"}, rec("MG-3", "Grace Okoro"))], MG("MG-3"), rc=["Grace Okoro", "Elm Court"], salient=[PR("PR-11")], tags=("gap:clarify_attr",)),
   T("How many buildings does she look after?", [], MG("MG-3"), rc=["Grace Okoro"], salient=[PR("PR-11")]),
   T("Does the building have a concierge?", [], PR("PR-11"), rc=["Elm Court"], salient=[MG("MG-3")], tags=X),
 ]),
 S("estates-007", "estates", [
   T("How many jobs did Maple House log last year's Q4?", [tool("list_work_orders", {"property_id": "PR-15", "period": "2025-Q4"}, [])], PR("PR-15"), {"period": "2025-Q4"}, rc=["Maple House"], tags=("gap:period",)),
   T("And this year's Q1?", [tool("list_work_orders", {"property_id": "PR-15", "period": "2026-Q1"}, [])], PR("PR-15"), {"period": "2026-Q1"}, rc=["Maple House"], tags=("gap:period",)),
   T("What about Canal Wharf?", [], PR("PR-16"), {"period": "2026-Q1"}, rc=["Canal Wharf", "2026-Q1"], tags=("gap:ellipsis",)),
   T("Who manages it?", [tool("lookup_manager", {"property_id": "PR-16"}, rec("MG-3", "Grace Okoro"))], MG("MG-3"), {"period": "2026-Q1"}, rc=["Canal Wharf"], salient=[PR("PR-16")]),
   T("Same for Elm Court.", [tool("lookup_manager", {"property_id": "PR-11"}, rec("MG-1", "Grace Liu"))], MG("MG-1"), rc=["Elm Court"], salient=[PR("PR-11")]),
 ]),
 S("estates-008", "estates", [
   T("List work orders at Harbourview between November 2 and November 8.", [tool("list_work_orders", {"property_id": "PR-10", "period": NOV}, [{"id": "WO-501"}])], PR("PR-10"), {"period": NOV}, rc=["Harbourview"], tags=("gap:period",)),
   T("Which of them are still open?", [tool("list_work_orders", {"property_id": "PR-10", "period": NOV, "status": "open"}, [])], PR("PR-10"), {"period": NOV, "status": "open"}, rc=["Harbourview Apartments"]),
   T("Who is the agent for Riverside Loft?", [tool("lookup_manager", {"property_id": "PR-13"}, rec("MG-2", "Owen Price"))], MG("MG-2"), {"period": NOV, "status": "open"}, rc=["Riverside Loft"], salient=[PR("PR-13")], tags=("gap:typo",)),
   T("Does he also look after Riverside Mews?", [], PR("PR-14"), {"period": NOV, "status": "open"}, rc=["Owen Price", "Riverside Mews"], salient=[MG("MG-2")]),
 ]),
 S("estates-009", "estates", [
   T("Pull up WO-503.", [tool("get_work_order", {"id": "WO-503"}, {"id": "WO-503", "issue": "lift"})], WO("WO-503"), rc=["WO-503"]),
   T("Which property is it at?", [tool("lookup_property", {"work_order_id": "WO-503"}, rec("PR-13", "Riverside Lofts"))], PR("PR-13"), rc=["WO-503"], salient=[WO("WO-503")]),
   T("Who is the property manager there?", [tool("lookup_manager", {"property_id": "PR-13"}, rec("MG-2", "Owen Price"))], MG("MG-2"), rc=["Riverside Lofts"], salient=[PR("PR-13"), WO("WO-503")]),
   T("Has he inspected it yet?", [], MG("MG-2"), rc=["Owen Price", "Riverside Lofts"], salient=[PR("PR-13"), WO("WO-503")], tags=X),
   T("Is its lift still broken?", [], PR("PR-13"), rc=["Riverside Lofts"], salient=[MG("MG-2"), WO("WO-503")], tags=X),
   T("Close the work order if so.", [], WO("WO-503"), rc=["WO-503"], salient=[PR("PR-13"), MG("MG-2")], tags=X),
 ]),
]

PT = kind("patient")
DC = kind("doctor")
AP = kind("appointment")
RX = kind("prescription")
clinic = [
 S("clinic-001", "clinic", [
   T("Pull up Liam Walsh.", [tool("lookup_patient", {"name": "Liam Walsh"}, rec("PT-2", "Liam Walsh"))], PT("PT-2"), rc=["Liam Walsh"]),
   T("Who is his doctor?", [tool("lookup_doctor", {"patient_id": "PT-2"}, rec("DC-2", "Dr Rafael Costa"))], DC("DC-2"), rc=["Liam Walsh"], salient=[PT("PT-2")]),
   T("When did he last see him?", [], DC("DC-2"), rc=["Dr Rafael Costa", "Liam Walsh"], salient=[PT("PT-2")], tags=X),
   T("Has the patient booked a follow-up?", [], PT("PT-2"), {"status": "booked"}, rc=["Liam Walsh"], salient=[DC("DC-2")], tags=X),
   T("Show me that appointment.", [tool("get_appointment", {"patient_id": "PT-2"}, {"id": "AP-903"})], AP("AP-903"), {"status": "booked"}, rc=["Liam Walsh"], salient=[PT("PT-2"), DC("DC-2")]),
   T("Who is it with?", [tool("lookup_doctor", {"appointment_id": "AP-903"}, rec("DC-1", "Dr Helen Park"))], DC("DC-1"), {"status": "booked"}, rc=["AP-903"], salient=[AP("AP-903"), PT("PT-2")]),
   T("Does she know his history?", [], DC("DC-1"), rc=["Dr Helen Park", "Liam Walsh"], salient=[AP("AP-903"), PT("PT-2")], tags=X),
 ]),
 S("clinic-002", "clinic", [
   T("How is Amara doing after the procedure?", [], None, clarify=True, options=["PT-1", "PT-3"]),
   T("The one on the cardiology ward.", [tool("lookup_patient", {"name": "Amara Osei"}, rec("PT-1", "Amara Osei"))], PT("PT-1"), rc=["Amara Osei"], tags=("gap:clarify_attr",)),
   T("Who is treating her?", [tool("lookup_doctor", {"patient_id": "PT-1"}, rec("DC-1", "Dr Helen Park"))], DC("DC-1"), rc=["Amara Osei"], salient=[PT("PT-1")]),
   T("Is she on call this week?", [], DC("DC-1"), {"period": "2026-11-30..2026-12-06"}, rc=["Dr Helen Park"], salient=[PT("PT-1")]),
   T("Did the patient pick up her prescription?", [], PT("PT-1"), {"period": "2026-11-30..2026-12-06"}, rc=["Amara Osei"], salient=[DC("DC-1")], tags=X),
   T("Show me RX-72.", [tool("get_prescription", {"id": "RX-72"}, {"id": "RX-72"})], RX("RX-72"), {"period": "2026-11-30..2026-12-06"}, rc=["RX-72"], salient=[PT("PT-1"), DC("DC-1")]),
   T("Who prescribed it?", [tool("lookup_doctor", {"prescription_id": "RX-72"}, rec("DC-3", "Dr Nia Evans"))], DC("DC-3"), rc=["RX-72"], salient=[RX("RX-72"), PT("PT-1")]),
 ]),
 S("clinic-003", "clinic", [
   T("Look up Dr Costa.", [tool("lookup_doctor", {"name": "Dr Rafael Costa"}, rec("DC-2", "Dr Rafael Costa"))], DC("DC-2"), rc=["Dr Costa"]),
   T("Which patients does he see on Mondays?", [], DC("DC-2"), rc=["Dr Rafael Costa"]),
   T("Pull up Liam Walsh.", [tool("lookup_patient", {"name": "Liam Walsh"}, rec("PT-2", "Liam Walsh"))], PT("PT-2"), rc=["Liam Walsh"], salient=[DC("DC-2")]),
   T("What time does the cafeteria open?", [], None),
   T("Has he been discharged?", [], None, tags=("after_topic_change",)),
 ]),
 S("clinic-004", "clinic", [
   T("List Amara Bello's appointments between December 1 and December 5.", [tool("list_appointments", {"patient_id": "PT-3", "period": "2026-12-01..2026-12-05"}, [{"id": "AP-905"}])],
     PT("PT-3"), {"period": "2026-12-01..2026-12-05"}, rc=["Amara Bello"], tags=("gap:period",)),
   T("Is the first one booked with Dr Evans?", [], DC("DC-3"), {"period": "2026-12-01..2026-12-05", "status": "booked"}, rc=["Dr Evans"], salient=[PT("PT-3")]),
   T("Does she still see her every month?", [], DC("DC-3"), {"period": "2026-12-01..2026-12-05", "status": "booked"}, rc=["Dr Nia Evans", "Amara Bello"], salient=[PT("PT-3")], tags=X),
   T("Pull up AP-905.", [tool("get_appointment", {"id": "AP-905"}, {"id": "AP-905"})], AP("AP-905"), {"status": "booked"}, rc=["AP-905"], salient=[DC("DC-3"), PT("PT-3")]),
   T("Move the booking to next week and tell the patient.", [], AP("AP-905"), {"period": "2026-12-07..2026-12-13"}, rc=["AP-905", "Amara Bello"], salient=[DC("DC-3"), PT("PT-3")], tags=X),
 ]),
 S("clinic-005", "clinic", [
   T("How many appointments did Dr Rafael Costra have in last year's Q4?", [tool("list_appointments", {"doctor_id": "DC-2", "period": "2025-Q4"}, [])],
     DC("DC-2"), {"period": "2025-Q4"}, rc=["Dr Rafael Costra"], tags=("gap:typo", "gap:period")),
   T("And this year?", [], DC("DC-2"), {"period": "2026"}, rc=["Dr Rafael Costa"], tags=("gap:ellipsis",)),
   T("How many of those were missed?", [], DC("DC-2"), {"period": "2026", "status": "missed"}, rc=["Dr Rafael Costa"]),
 ]),
]

U = ("untyped",)
untyped = [
 S("untyped-001", "crm", [
   T("Pull up Brightwater Farms.", [BW], C("C-1080"), rc=["Brightwater Farms"], tags=U),
   T("Who's their rep?", [BEN], R("R-08"), rc=["Brightwater Farms"], tags=U),
   T("What did they order last quarter?", [], R("R-08"), Q3, rc=["Ben Carter"], tags=U),
   T("Has he chased them about it?", [], R("R-08"), Q3, rc=["Ben Carter"], tags=U),
 ]),
 S("untyped-002", "crm", [
   T("Tell me about O-4431.", [tool("get_order", {"id": "O-4431"}, {"id": "O-4431"})], O("O-4431"), rc=["O-4431"], tags=U),
   T("Which customer placed it?", [tool("lookup_customer", {"order_id": "O-4431"}, rec("C-1081", "Cobalt Freight"))], C("C-1081"), rc=["O-4431"], tags=U),
   T("When is that order due to ship?", [], C("C-1081"), rc=["Cobalt Freight"], tags=U),
   T("Who's the rep on it?", [tool("lookup_rep", {"order_id": "O-4431"}, rec("R-03", "Chris Lindqvist"))], R("R-03"), rc=["Cobalt Freight"], tags=U),
   T("Does he know the customer is unhappy?", [], R("R-03"), rc=["Chris Lindqvist"], tags=U),
 ]),
 S("untyped-003", "crm", [
   T("Show me Meridian Hotels.", [tool("lookup_customer", {"name": "Meridian Hotels"}, rec("C-1083", "Meridian Hotels"))], C("C-1083"), rc=["Meridian Hotels"], tags=U),
   T("Who's their account manager?", [tool("lookup_rep", {"customer_id": "C-1083"}, rec("R-07", "Sofia Rossi"))], R("R-07"), rc=["Meridian Hotels"], tags=U),
   T("How do I reset my password for the expense tool?", [], None, tags=U),
   T("Did they renew last year?", [], None, {"period": "2025"}, tags=U),
 ]),
 S("untyped-004", "crm", [
   T("What's in O-4482?", [tool("get_order", {"id": "O-4482"}, {"id": "O-4482"})], O("O-4482"), rc=["O-4482"], tags=U),
   T("Which product is it?", [tool("lookup_product", {"order_id": "O-4482"}, rec("P-201", "Vento X2 Scanner"))], P("P-201"), rc=["O-4482"], tags=U),
   T("Who bought that order?", [tool("lookup_customer", {"order_id": "O-4482"}, rec("C-1095", "Sakura Electronics"))], C("C-1095"), rc=["Vento X2 Scanner"], tags=U),
   T("Is the product still in stock?", [], C("C-1095"), tags=U),
 ]),
]

# ---------------------------------------------------------------- generalisation gaps
def G(k: str) -> tuple[str]:
    return ("gap:" + k,)
VH = kind("vehicle")
DR = kind("driver")
DP = kind("depot")
gaps = [
 S("gaps-001", "crm", [
   T("What did Granite Peak Bank order in last year's Q4?", [tool("lookup_customer", {"name": "Granite Peak Bank"}, rec("C-1089", "Granite Peak Bank")),
     tool("list_orders", {"customer_id": "C-1089", "period": "2025-Q4"}, [])], C("C-1089"), {"period": "2025-Q4"}, rc=["Granite Peak Bank"], tags=G("period")),
   T("And the fourth quarter of 2024?", [tool("list_orders", {"customer_id": "C-1089", "period": "2024-Q4"}, [])], C("C-1089"), {"period": "2024-Q4"}, rc=["Granite Peak Bank"], tags=G("period")),
   T("What about between November 2 and November 8?", [tool("list_orders", {"customer_id": "C-1089", "period": NOV}, [])], C("C-1089"), {"period": NOV}, rc=["Granite Peak Bank", NOV], tags=G("period")),
   T("Was any of it overdue in the week of November 9?", [], C("C-1089"), {"period": "2026-11-09..2026-11-15", "status": "overdue"}, rc=["Granite Peak Bank"], tags=G("period")),
   T("What about last November?", [], C("C-1089"), {"period": "2025-11", "status": "overdue"}, rc=["Granite Peak Bank"], tags=G("period")),
 ]),
 S("gaps-002", "crm", [
   T("How is Harbor Helth Partners doing this quarter?", [tool("lookup_customer", {"name": "Harbor Health Partners"}, rec("C-1051", "Harbor Health Partners"))], C("C-1051"), {"period": "2026-Q4"}, rc=["Harbor Helth Partners"], tags=G("typo")),
   T("What about Apex Dental Lab this quarter?", [tool("lookup_customer", {"name": "Apex Dental Labs"}, rec("C-1071", "Apex Dental Labs"))], C("C-1071"), {"period": "2026-Q4"}, rc=["Apex Dental Lab"], tags=G("typo")),
   T("Did Quarry Lane Bulders order anything last month?", [tool("lookup_customer", {"name": "Quarry Lane Builders"}, rec("C-1087", "Quarry Lane Builders"))], C("C-1087"), {"period": "2026-10"}, rc=["Quarry Lane Bulders"], tags=G("typo")),
   T("Is Brightwater Farsm on the list too?", [], C("C-1080"), {"period": "2026-10"}, rc=["Brightwater Farsm"], tags=G("typo")),
 ]),
 S("gaps-003", "crm", [
   T("How is Northline doing on payments?", [], None, clarify=True, options=["C-1042", "C-1043", "C-1044"]),
   T("I mean the Vancouver-based logistics company, not the food one.", [tool("lookup_customer", {"name": "Northline Logistics"}, rec("C-1044", "Northline Logistics"))], C("C-1044"), rc=["Northline Logistics"], tags=G("clarify_attr")),
   T("Who covers them?", [tool("lookup_rep", {"customer_id": "C-1044"}, rec("R-01", "Priya Nair"))], R("R-01"), rc=["Northline Logistics"]),
 ]),
 S("gaps-004", "crm", [
   T("Pull the Q3 numbers for Apex.", [], None, clarify=True, options=["C-1070", "C-1071"]),
   T("The dental lab in Texas, I believe.", [tool("lookup_customer", {"name": "Apex Dental Labs"}, rec("C-1071", "Apex Dental Labs")),
     tool("list_orders", {"customer_id": "C-1071", "period": "2026-Q3"}, [])], C("C-1071"), Q3, rc=["Apex Dental Labs"], tags=G("clarify_attr")),
   T("Who's the contact there?", [], C("C-1071"), Q3, rc=["Apex Dental Labs"]),
 ]),
 S("gaps-005", "crm", [
   T("What did Velvet Road Coffee spend in Q3?", [tool("lookup_customer", {"name": "Velvet Road Coffee"}, rec("C-1097", "Velvet Road Coffee")),
     tool("list_orders", {"customer_id": "C-1097", "period": "2026-Q3"}, [])], C("C-1097"), Q3, rc=["Velvet Road Coffee"]),
   T("What if we look at Q2 instead?", [], C("C-1097"), {"period": "2026-Q2"}, rc=["Velvet Road Coffee"], tags=G("ellipsis")),
   T("Now do EMEA.", [], C("C-1097"), {"period": "2026-Q2", "region": "emea"}, rc=["Velvet Road Coffee"], tags=G("ellipsis")),
   T("Only the overdue ones.", [], C("C-1097"), {"period": "2026-Q2", "region": "emea", "status": "overdue"}, rc=["Velvet Road Coffee"], tags=G("ellipsis")),
   T("And their renewal date?", [], C("C-1097"), {"region": "emea", "status": "overdue"}, rc=["Velvet Road Coffee"], tags=G("ellipsis")),
 ]),
 S("gaps-006", "crm", [
   T("Show me Lumen Health's open orders.", [tool("lookup_customer", {"name": "Lumen Health"}, rec("C-1085", "Lumen Health")),
     tool("list_orders", {"customer_id": "C-1085", "status": "open"}, [{"id": "O-4447"}])], C("C-1085"), {"status": "open"}, rc=["Lumen Health"]),
   T("How many orders are still open?", [], C("C-1085"), {"status": "open"}, rc=["Lumen Health"], tags=G("ellipsis")),
   T("What's the total value of those orders?", [], C("C-1085"), {"status": "open"}, rc=["Lumen Health"], tags=G("ellipsis")),
 ]),
 S("gaps-007", "fleet", [
   T("Where is the Blue Sprinter right now?", [tool("lookup_vehicle", {"name": "Blue Sprinter"}, rec("VH-7", "Blue Sprinter"))], VH("VH-7"), rc=["Blue Sprinter"]),
   T("Who drove it last week?", [tool("lookup_driver", {"vehicle_id": "VH-7"}, rec("DR-3", "Tomasz Nowak"))], DR("DR-3"), {"period": "2026-11-23..2026-11-29"}, rc=["Blue Sprinter"]),
   T("How many trips did he do between November 2 and November 8?", [tool("list_trips", {"driver_id": "DR-3", "period": NOV}, [])], DR("DR-3"), {"period": NOV}, rc=["Tomasz Nowak"], tags=G("period")),
   T("And in last year's Q4?", [tool("list_trips", {"driver_id": "DR-3", "period": "2025-Q4"}, [])], DR("DR-3"), {"period": "2025-Q4"}, rc=["Tomasz Nowak"], tags=G("period")),
 ]),
 S("gaps-008", "fleet", [
   T("Is the Iveco Daly 12 in the shop?", [], VH("VH-12"), {"status": "maintenance"}, rc=["Iveco Daly 12"], tags=G("typo")),
   T("Which depot is it based at?", [tool("lookup_depot", {"vehicle_id": "VH-12"}, rec("DP-2", "Harbour Road Depot"))], DP("DP-2"), {"status": "maintenance"}, rc=["Iveco Daily 12"]),
   T("How is Maria getting on this month?", [], DP("DP-2"), {"status": "maintenance"}, clarify=True, options=["DR-1", "DR-2"]),
   T("The Maria who works out of Airport Depot, I think.", [tool("lookup_driver", {"name": "Maria Kowalski"}, rec("DR-2", "Maria Kowalski"))], DR("DR-2"), {"period": "2026-11"}, rc=["Maria Kowalski"], tags=G("clarify_attr")),
   T("Does she drive the White Sprinter?", [], VH("VH-8"), {"period": "2026-11"}, rc=["Maria Kowalski", "White Sprinter"]),
 ]),
]

with open("tests/data/typed_dev.jsonl", "w") as f:
    for s in typed + estates + clinic + untyped:
        f.write(json.dumps(s) + "\n")
with open("tests/data/gaps_dev.jsonl", "w") as f:
    for s in gaps:
        f.write(json.dumps(s) + "\n")
everything = typed + estates + clinic + untyped
print(len(everything), sum(len(s["turns"]) for s in everything), len(gaps), sum(len(s["turns"]) for s in gaps))
