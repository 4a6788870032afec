// Live runs: what the daemon offers today is a session's background runs
// (the session's owner only), with cancel.

import { get, post, type BackgroundRun } from "../api";
import { errorBox, h, table, when } from "../dom";
import type { Ctx } from "../main";

export async function runsPage(ctx: Ctx): Promise<Node> {
  const session = ctx.route.query.get("session") ?? "";
  const form = h("form", { class: "filters", onsubmit: (ev) => {
    ev.preventDefault();
    const v = String(new FormData(ev.target as HTMLFormElement).get("session") ?? "").trim();
    ctx.go("#/runs" + (v ? "?session=" + encodeURIComponent(v) : ""));
  } }, h("label", {}, "Session", h("input", { name: "session", value: session, placeholder: "ses_…", required: true })), h("button", { type: "submit" }, "List"));
  const head = [h("h1", {}, "Live runs"), h("p", {}, "A session's background runs (yours only). The daemon does not list every live run yet."), form];
  if (!session) return h("section", {}, head);
  const res = await get<{ runs: BackgroundRun[] }>(`/sessions/${encodeURIComponent(session)}/runs`);
  const status = h("div", { "aria-live": "polite" });
  const rows = (res.runs ?? []).map((r) =>
    h("tr", { "data-testid": "run-row" }, h("td", {}, r.run_id), h("td", {}, r.skill ?? ""), h("td", {}, r.path ?? ""),
      h("td", {}, r.state + (r.paused ? " (paused)" : "")), h("td", {}, when(r.started)),
      h("td", {}, r.exit_code !== undefined ? String(r.exit_code) + (r.signal ? ` (${r.signal})` : "") : ""),
      h("td", {}, r.state === "running" ? h("button", { type: "button", class: "danger", "data-testid": "cancel", onclick: async () => {
        try {
          await post(`/runs/${encodeURIComponent(r.run_id)}/cancel`);
          ctx.rerender();
        } catch (e) {
          status.replaceChildren(errorBox(e));
        }
      } }, "Cancel") : "")));
  return h("section", {}, head, status,
    rows.length ? table(`${rows.length} run(s)`, ["Run", "Skill", "Script", "State", "Started", "Exit", ""], rows) : h("p", {}, "No background runs in this session."));
}
