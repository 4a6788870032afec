// Live runs: every run in progress in the daemon (an approver's view; a
// non-approver sees its own), with cancel for one's own runs; and a
// session's background runs (the session's owner only).

import { get, post, type BackgroundRun, type LiveRuns } from "../api";
import { errorBox, h, table, when } from "../dom";
import type { Ctx } from "../main";

function cancelButton(ctx: Ctx, runID: string, status: HTMLElement): HTMLElement {
  return h("button", { type: "button", class: "danger", "data-testid": "cancel", onclick: async () => {
    try {
      await post(`/runs/${encodeURIComponent(runID)}/cancel`);
      ctx.rerender();
    } catch (e) {
      status.replaceChildren(errorBox(e));
    }
  } }, "Cancel");
}

export async function runsPage(ctx: Ctx): Promise<Node> {
  const session = ctx.route.query.get("session") ?? "";
  const status = h("div", { "aria-live": "polite" });
  const live = await get<LiveRuns>("/runs");
  const liveRows = live.runs.map((r) =>
    h("tr", { "data-testid": "live-run-row", "data-run": r.run_id },
      h("td", {}, r.run_id), h("td", {}, String(r.uid)), h("td", {}, r.skill ?? ""), h("td", {}, r.script ?? ""),
      h("td", {}, r.session_id ?? ""), h("td", {}, when(r.started)),
      h("td", {}, r.uid === ctx.who.uid ? cancelButton(ctx, r.run_id, status) : "")));
  const form = h("form", { class: "filters", onsubmit: (ev) => {
    ev.preventDefault();
    const v = String(new FormData(ev.target as HTMLFormElement).get("session") ?? "").trim();
    ctx.go("#/runs" + (v ? "?session=" + encodeURIComponent(v) : ""));
  } }, h("label", {}, "Session", h("input", { name: "session", value: session, placeholder: "ses_…", required: true })), h("button", { type: "submit" }, "List"));
  const out = h("section", {},
    h("h1", {}, "Live runs"),
    h("p", {}, live.own_only ? "Your runs in progress (you are not an approver)." : "Every run in progress in this daemon.", " ",
      h("button", { type: "button", onclick: () => ctx.rerender() }, "Refresh")),
    status,
    liveRows.length ? table(`${liveRows.length} run(s) in progress`, ["Run", "Uid", "Skill", "Script", "Session", "Started", ""], liveRows)
      : h("p", { "data-testid": "no-live-runs" }, "No runs in progress."),
    h("h2", {}, "A session's background runs"),
    form);
  if (!session) return out;
  const res = await get<{ runs: BackgroundRun[] }>(`/sessions/${encodeURIComponent(session)}/runs`);
  const rows = (res.runs ?? []).map((r) =>
    h("tr", { "data-testid": "run-row" }, h("td", {}, r.run_id), h("td", {}, r.skill ?? ""), h("td", {}, r.path ?? ""),
      h("td", {}, r.state + (r.paused ? " (paused)" : "")), h("td", {}, when(r.started)),
      h("td", {}, r.exit_code !== undefined ? String(r.exit_code) + (r.signal ? ` (${r.signal})` : "") : ""),
      h("td", {}, r.state === "running" ? cancelButton(ctx, r.run_id, status) : "")));
  out.append(rows.length ? table(`${rows.length} background run(s)`, ["Run", "Skill", "Script", "State", "Started", "Exit", ""], rows)
    : h("p", {}, "No background runs in this session."));
  return out;
}
