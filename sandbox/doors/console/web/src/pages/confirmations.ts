// Pending confirmations: the list, and one in full with exactly what an
// approval binds. Approve and deny are offered to approvers only; the
// daemon refuses anyone else, and a decision is final (a second one shows
// the daemon's refusal).

import { get, post, query, type Confirmation } from "../api";
import { diffView, errorBox, h, table, when } from "../dom";
import type { Ctx } from "../main";

// detailOrder is how the binding details are listed; others follow.
const detailOrder: [string, string][] = [
  ["skill", "Skill"],
  ["skill_digest", "Skill digest"],
  ["script", "Script"],
  ["script_sha256", "Script sha256"],
  ["command", "Command"],
  ["language", "Language"],
  ["skills", "Mounted skills"],
  ["code_sha256", "Code sha256"],
  ["code", "Code"],
  ["args", "Args"],
  ["env_names", "Env names"],
  ["inputs", "Input files"],
  ["network", "Network"],
  ["egress", "Egress"],
  ["lock", "Lock"],
  ["lock_changes", "Files changed since the lock"],
  ["lock_diff", "Diff against the locked version"],
  ["lock_notes", "Not shown of the change"],
];

// detailView shows one detail: diffs marked, multi-line lists as blocks.
function detailView(k: string, v: string): Node {
  if (k === "lock_diff") return diffView(v, "lock-diff");
  return k === "inputs" || k === "code" || k === "lock_changes" || k === "lock_notes" ? h("pre", {}, v) : h("code", {}, v);
}

export async function confirmationsPage(ctx: Ctx): Promise<Node> {
  const state = ctx.route.query.get("state") ?? "pending";
  const res = await get<{ confirmations: Confirmation[] }>("/confirmations" + query({ state: state === "all" ? "" : state }));
  const select = h("select", { id: "state", name: "state", onchange: (ev) => ctx.go("#/confirmations?state=" + (ev.target as HTMLSelectElement).value) },
    ["pending", "approved", "denied", "used", "expired", "all"].map((v) => h("option", { value: v, selected: v === state }, v)));
  const rows = res.confirmations.map((c) =>
    h("tr", { "data-testid": "confirmation-row", "data-id": c.id },
      h("td", {}, h("a", { href: `#/confirmations/${encodeURIComponent(c.id)}` }, c.id)),
      h("td", {}, c.details?.skill ?? (c.details?.language ? `${c.details.language} code` : "")),
      h("td", {}, c.reason), h("td", {}, c.rule), h("td", {}, String(c.requested_by)),
      h("td", {}, when(c.created)), h("td", {}, when(c.expires)), h("td", {}, c.state)));
  return h("section", {},
    h("h1", {}, "Confirmations"),
    h("p", {}, ctx.who.approver ? "You are an approver: every request is listed." : "You are not an approver: only requests of your own sessions are listed."),
    h("p", {}, h("label", { for: "state" }, "State "), select),
    rows.length ? table(`${rows.length} confirmation(s)`, ["ID", "Skill", "Reason", "Rule", "Requested by uid", "Created", "Expires", "State"], rows)
      : h("p", { "data-testid": "no-confirmations" }, `No ${state === "all" ? "" : state + " "}confirmations.`));
}

export async function confirmationPage(ctx: Ctx): Promise<Node> {
  const id = ctx.route.path[1];
  const c = await get<Confirmation>(`/confirmations/${encodeURIComponent(id)}`);
  const details = c.details ?? {};
  const known = new Set(detailOrder.map(([k]) => k));
  const keys = [...detailOrder.filter(([k]) => k in details), ...Object.keys(details).filter((k) => !known.has(k)).sort().map((k) => [k, k] as [string, string])];
  const binds = keys.map(([k, label]) =>
    h("tr", { "data-testid": `detail-${k}` }, h("th", { scope: "row" }, label), h("td", {}, detailView(k, details[k]))));
  const status = h("div", { "aria-live": "polite" });
  const decide = (verb: "approve" | "deny") => async () => {
    status.replaceChildren(h("p", {}, verb === "approve" ? "Approving…" : "Denying…"));
    try {
      const after = await post<Confirmation>(`/confirmations/${encodeURIComponent(id)}/${verb}`);
      status.replaceChildren(h("p", { "data-testid": "decision-done" }, `Confirmation ${after.id} is now ${after.state}.`));
      stateCell.textContent = after.state;
      buttons.remove();
    } catch (e) {
      status.replaceChildren(errorBox(e, "decision-error"));
    }
  };
  const stateCell = h("td", { "data-testid": "confirmation-state" }, c.state);
  const buttons = h("p", { class: "actions" },
    h("button", { type: "button", "data-testid": "approve", onclick: decide("approve") }, "Approve"), " ",
    h("button", { type: "button", "data-testid": "deny", class: "danger", onclick: decide("deny") }, "Deny"));
  let decision: Node;
  if (!ctx.who.approver) {
    decision = h("p", { "data-testid": "not-approver" }, `You (uid ${ctx.who.uid}) are not an approver: the daemon refuses your decisions.`);
  } else if (c.state !== "pending") {
    decision = h("p", {}, `This request is ${c.state}; decisions are final.`);
  } else {
    decision = buttons;
  }
  const row = (label: string, v: Node | string) => h("tr", {}, h("th", { scope: "row" }, label), typeof v === "string" ? h("td", {}, v) : v);
  return h("section", {},
    h("p", {}, h("a", { href: "#/confirmations" }, "← all confirmations")),
    h("h1", {}, `Confirmation ${c.id}`),
    h("table", { class: "kv" }, h("tbody", {},
      row("State", stateCell), row("Reason", c.reason), row("Rule", c.rule), row("Session", c.session_id),
      row("Requested by uid", String(c.requested_by)), row("Approval digest", h("td", {}, h("code", { "data-testid": "approval-digest" }, c.digest))),
      row("Created", when(c.created)), row("Expires", when(c.expires)),
      c.decided_by ? row("Decided by uid", `${c.decided_by.uid} at ${when(c.decided_at)}`) : null,
      c.used_at ? row("Used", when(c.used_at)) : null)),
    h("h2", {}, "What the approval binds"),
    h("p", {}, "An approval is for this exact run: the same skill digest, script, args, env names and input files; any change asks again. When the skill is in the lock, the change since the pinned version is shown."),
    h("table", { class: "kv", "data-testid": "binds" }, h("tbody", {}, binds)),
    decision, status);
}
