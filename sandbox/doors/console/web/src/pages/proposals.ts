// Proposals: changes to skills that sessions asked for, with their diffs;
// approvers approve (applying the change and updating the lock) or reject.

import { get, post, query, type Proposal } from "../api";
import { diffView, errorBox, h, table, when } from "../dom";
import type { Ctx } from "../main";

export async function proposalsPage(ctx: Ctx): Promise<Node> {
  const state = ctx.route.query.get("state") ?? "";
  const res = await get<{ proposals: Proposal[] }>("/proposals" + query({ state }));
  const rows = res.proposals.map((p) =>
    h("tr", { "data-testid": "proposal-row" },
      h("td", {}, h("a", { href: `#/proposals/${encodeURIComponent(p.id)}` }, p.id)), h("td", {}, p.skill), h("td", {}, p.state),
      h("td", {}, String(p.proposed_by.uid)), h("td", {}, when(p.created)), h("td", {}, String(p.files.length)), h("td", {}, p.justification)));
  return h("section", {},
    h("h1", {}, "Proposals"),
    h("p", {}, h("label", { for: "pstate" }, "State "), h("select", { id: "pstate", onchange: (ev) => ctx.go("#/proposals" + query({ state: (ev.target as HTMLSelectElement).value })) },
      ["", "pending", "applied", "exported", "rejected"].map((v) => h("option", { value: v, selected: v === state }, v || "all")))),
    rows.length ? table(`${rows.length} proposal(s)`, ["ID", "Skill", "State", "Proposed by uid", "Created", "Files", "Justification"], rows) : h("p", {}, "No proposals."));
}

export async function proposalPage(ctx: Ctx): Promise<Node> {
  const id = ctx.route.path[1];
  const p = await get<Proposal>(`/proposals/${encodeURIComponent(id)}`);
  const status = h("div", { "aria-live": "polite" });
  const note = h("textarea", { id: "note", rows: 2, cols: 60 });
  const decide = (verb: "approve" | "reject") => async () => {
    try {
      const after = await post<Proposal>(`/proposals/${encodeURIComponent(id)}/${verb}`, { note: note.value });
      status.replaceChildren(h("p", { "data-testid": "decision-done" }, `Proposal ${after.id} is now ${after.state}` + (after.lock_updated ? "; the lock was updated." : ".")));
      actions.remove();
    } catch (e) {
      status.replaceChildren(errorBox(e, "decision-error"));
    }
  };
  const actions = h("div", {},
    h("p", {}, h("label", { for: "note" }, "Note (optional)"), h("br"), note),
    h("p", { class: "actions" },
      h("button", { type: "button", "data-testid": "approve", onclick: decide("approve") }, "Approve"), " ",
      h("button", { type: "button", "data-testid": "reject", class: "danger", onclick: decide("reject") }, "Reject")));
  const row = (k: string, v: string) => h("tr", {}, h("th", { scope: "row" }, k), h("td", {}, v));
  return h("section", {},
    h("p", {}, h("a", { href: "#/proposals" }, "← all proposals")),
    h("h1", {}, `Proposal ${p.id}`),
    h("table", { class: "kv" }, h("tbody", {},
      row("Skill", p.skill), row("State", p.state), row("Base digest", p.base_digest), p.new_digest ? row("New digest", p.new_digest) : null,
      row("Proposed by uid", String(p.proposed_by.uid)), row("Created", when(p.created)), row("Files", p.files.join(", ")),
      row("Justification", p.justification), p.evidence ? row("Evidence", p.evidence) : null,
      p.decided_by ? row("Decided by uid", `${p.decided_by.uid} at ${when(p.decided_at)}`) : null, p.note ? row("Note", p.note) : null)),
    h("h2", {}, "Diff"),
    p.diff ? diffView(p.diff, "proposal-diff") : h("p", {}, "The daemon gave no diff for this proposal."),
    ctx.who.approver && p.state === "pending" ? actions : null,
    !ctx.who.approver ? h("p", { "data-testid": "not-approver" }, `You (uid ${ctx.who.uid}) are not an approver.`) : null,
    status);
}
