// Live runs: every run in progress in the daemon (an approver's view; a
// non-approver sees its own), with cancel for one's own runs; one run's
// output as it is written (#/runs/{run}); and a session's background runs
// (the session's owner only).

import {
  get, post, runOutputURL, type BackgroundRun, type LiveRuns, type RunExitedEvent, type RunOutputDroppedEvent,
  type RunOutputEvent, type RunStartedEvent,
} from "../api";
import { errorBox, h, table, when } from "../dom";
import type { Ctx } from "../main";

function cancelButton(ctx: Ctx, runID: string, status: HTMLElement, rerender = true): HTMLElement {
  return h("button", { type: "button", class: "danger", "data-testid": "cancel", onclick: async () => {
    try {
      await post(`/runs/${encodeURIComponent(runID)}/cancel`);
      if (rerender) ctx.rerender();
    } catch (e) {
      status.replaceChildren(errorBox(e));
    }
  } }, "Cancel");
}

export async function runsPage(ctx: Ctx): Promise<Node> {
  if (ctx.route.path[1]) return runPage(ctx, ctx.route.path[1]);
  const session = ctx.route.query.get("session") ?? "";
  const status = h("div", { "aria-live": "polite" });
  const live = await get<LiveRuns>("/runs");
  const liveRows = live.runs.map((r) =>
    h("tr", { "data-testid": "live-run-row", "data-run": r.run_id },
      h("td", {}, h("a", { href: `#/runs/${encodeURIComponent(r.run_id)}`, "data-testid": "follow", title: "See its output live" }, r.run_id)),
      h("td", {}, String(r.uid)), h("td", {}, r.skill ?? ""), h("td", {}, r.script ?? ""),
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

// The page keeps at most this much output; older text is cut with a note.
const maxShown = 512 * 1024;

// runPage follows one live run: its output as the daemon streams it (the
// newest part of what was written before the page opened first), then how
// it ended. Cancel is offered for one's own run.
async function runPage(ctx: Ctx, runID: string): Promise<Node> {
  const live = await get<LiveRuns>("/runs");
  const run = live.runs.find((r) => r.run_id === runID);
  const back = h("a", { href: "#/runs" }, "All live runs");
  if (!run) {
    return h("section", {}, h("h1", {}, `Run ${runID}`),
      h("p", { "data-testid": "run-state", "data-state": "gone" }, "This run is not running: it has ended, or it is not yours. Its record is in the audit log. ", back));
  }
  const status = h("div", { "aria-live": "polite" });
  const state = h("p", { "data-testid": "run-state", "data-state": "running" }, "Running…");
  const output = h("pre", { class: "run-output", "data-testid": "run-output", "aria-live": "off" });
  let shown = 0;
  const add = (node: Node, size: number) => {
    const follow = output.scrollTop + output.clientHeight >= output.scrollHeight - 4;
    output.append(node);
    shown += size;
    while (shown > maxShown && output.firstChild) {
      const first = output.firstChild;
      shown -= (first.textContent ?? "").length;
      first.remove();
      if (!output.querySelector('[data-testid="run-trimmed"]')) {
        output.prepend(h("span", { class: "note", "data-testid": "run-trimmed" }, "[earlier output cut from this page to keep it small]\n"));
      }
    }
    if (follow) output.scrollTop = output.scrollHeight;
  };
  const cancel = run.uid === ctx.who.uid ? cancelButton(ctx, runID, status, false) : h("span");
  const es = new EventSource(runOutputURL(runID));
  let ended = false;
  const stop = () => es.close();
  window.addEventListener("hashchange", stop, { once: true });
  es.addEventListener("run.started", (ev) => {
    const e = JSON.parse((ev as MessageEvent<string>).data) as RunStartedEvent;
    state.textContent = `Running: ${e.skill || "code"}${e.path ? " " + e.path : ""}`;
  });
  es.addEventListener("run.output", (ev) => {
    const e = JSON.parse((ev as MessageEvent<string>).data) as RunOutputEvent;
    add(h("span", { class: e.stream, "data-seq": e.seq }, e.data), e.data.length);
  });
  es.addEventListener("run.output_dropped", (ev) => {
    const e = JSON.parse((ev as MessageEvent<string>).data) as RunOutputDroppedEvent;
    add(h("span", { class: "note", "data-testid": "run-dropped" },
      `\n[${e.bytes} bytes in ${e.events} chunk(s) skipped: written before this page opened, or faster than it read; the run's result has them]\n`), 0);
  });
  es.addEventListener("run.exited", (ev) => {
    const e = JSON.parse((ev as MessageEvent<string>).data) as RunExitedEvent;
    ended = true;
    stop();
    window.removeEventListener("hashchange", stop);
    cancel.remove();
    state.dataset.state = "ended";
    state.dataset.reason = e.reason;
    state.textContent = `Ended: ${e.reason}` + (e.reason === "error" ? ` (${e.error ?? "no detail"})` :
      ` (exit ${e.exit_code}${e.signal ? ", " + e.signal : ""}) after ${(e.duration_ms / 1000).toFixed(1)} s`);
  });
  es.onerror = () => {
    if (ended || es.readyState !== EventSource.CLOSED) return;
    stop();
    state.dataset.state = "lost";
    state.textContent = "The output stream closed before the run ended (the run may have ended; see the audit log).";
  };
  return h("section", {},
    h("h1", {}, `Run ${runID}`),
    h("p", {}, `uid ${run.uid} · ${run.skill ?? "code"} ${run.script ?? ""} · session ${run.session_id ?? "none"} · started ${when(run.started)} `, cancel, " ", back),
    state, status, output);
}
