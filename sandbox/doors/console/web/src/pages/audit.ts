// Audit search: the filters `skillbox audit query` takes, the matching
// records, and the chain's verification, which comes with every search.

import { get, query, type AuditSearch } from "../api";
import { h, table, when } from "../dom";
import type { Ctx } from "../main";

const fields: [string, string, string][] = [
  ["session", "Session", "ses_…"],
  ["skill", "Skill", "name"],
  ["uid", "Uid", "0"],
  ["event", "Event", "run.end or run.*"],
  ["since", "Since", "24h, 7d or 2025-01-02"],
  ["until", "Until", "RFC 3339 or age"],
  ["limit", "Limit", "200"],
];

export async function auditPage(ctx: Ctx): Promise<Node> {
  const q = ctx.route.query;
  const params: Record<string, string> = {};
  for (const [k] of fields) if (q.get(k)) params[k] = q.get(k)!;
  const form = h("form", { class: "filters", "data-testid": "audit-filters", onsubmit: (ev) => {
    ev.preventDefault();
    const data = new FormData(ev.target as HTMLFormElement);
    const next: Record<string, string> = {};
    for (const [k] of fields) next[k] = String(data.get(k) ?? "").trim();
    ctx.go("#/audit" + query(next));
  } },
  fields.map(([k, label, hint]) => h("label", {}, label, h("input", { name: k, value: params[k] ?? "", placeholder: hint, "data-testid": `filter-${k}` }))),
  h("button", { type: "submit", "data-testid": "search" }, "Search"));

  const res = await get<AuditSearch>("/audit" + query(params));
  const c = res.chain;
  const chain = c.intact
    ? h("p", { class: "chain ok", "data-testid": "chain-status", "data-intact": "true" }, `Chain intact: ${c.records} record(s) in ${c.chains} chain(s) verify.`)
    : h("p", { class: "chain broken", role: "alert", "data-testid": "chain-status", "data-intact": "false" }, `Chain BROKEN: ${c.finding ?? "the log does not verify"}`);
  const rows = res.records.map((r) =>
    h("tr", { "data-testid": "audit-row", "data-event": r.event, "data-run": r.run?.run_id ?? "" },
      h("td", {}, String(r.seq)), h("td", {}, when(r.time)), h("td", {}, r.event),
      h("td", {}, r.peer ? String(r.peer.uid) : ""), h("td", {}, r.session_id ?? ""),
      h("td", {}, r.skill?.name ?? ""), h("td", {}, r.run?.run_id ?? ""),
      h("td", {}, [r.outcome, r.run?.reason, r.error].filter(Boolean).join(" · "))));
  return h("section", {},
    h("h1", {}, "Audit search"),
    chain,
    form,
    res.own_only ? h("p", {}, "You are not an approver: only the run records of your own uid are searched.") : null,
    h("p", { "data-testid": "audit-matched" }, `${res.matched} record(s) match; the newest ${res.records.length} are shown, oldest first.`),
    rows.length ? table("Matching records", ["Seq", "Time", "Event", "Uid", "Session", "Skill", "Run", "Outcome"], rows) : null);
}
