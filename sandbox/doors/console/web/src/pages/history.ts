// Per-skill history: runs and failures by reason, duration percentiles
// and egress per time bucket, from the run.end records the caller may see.

import { get, query, type SkillHistory } from "../api";
import { bars, lines, type Series } from "../charts";
import { h, table } from "../dom";
import type { Ctx } from "../main";

const palette = ["#b42318", "#b54708", "#6941c6", "#c11574", "#026aa2", "#4e5ba6", "#667085"];

// label names a bucket by its start: the day for buckets of a day or
// more, else the day and time (UTC).
function label(t: string, bucket: string): string {
  const iso = new Date(t).toISOString();
  const hours = Number(/^(\d+)h/.exec(bucket)?.[1] ?? 0);
  return hours >= 24 ? iso.slice(0, 10) : iso.slice(5, 16).replace("T", " ");
}

export async function historyPage(ctx: Ctx): Promise<Node> {
  const skill = ctx.route.path[1] ?? "";
  const q = ctx.route.query;
  const since = q.get("since") ?? "7d", until = q.get("until") ?? "", bucket = q.get("bucket") ?? "1h";
  const form = h("form", { class: "filters", onsubmit: (ev) => {
    ev.preventDefault();
    const d = new FormData(ev.target as HTMLFormElement);
    const v = (k: string) => String(d.get(k) ?? "").trim();
    ctx.go(`#/skills/${encodeURIComponent(v("skill"))}` + query({ since: v("since"), until: v("until"), bucket: v("bucket") }));
  } },
  h("label", {}, "Skill", h("input", { name: "skill", value: skill, required: true, "data-testid": "history-skill" })),
  h("label", {}, "Since", h("input", { name: "since", value: since, placeholder: "7d" })),
  h("label", {}, "Until", h("input", { name: "until", value: until, placeholder: "now" })),
  h("label", {}, "Bucket", h("input", { name: "bucket", value: bucket, placeholder: "1h" })),
  h("button", { type: "submit" }, "Show"));
  const head = [h("h1", {}, skill ? `History of ${skill}` : "Skill history"), form];
  if (!skill) return h("section", {}, head, h("p", {}, "Name a skill to see its runs over time."));

  const hist = await get<SkillHistory>(`/skills/${encodeURIComponent(skill)}/history` + query({ since, until, bucket }));
  const b = hist.buckets;
  const labels = b.map((x) => label(x.start, hist.bucket));
  const reasons = [...new Set(b.flatMap((x) => Object.keys(x.failures)))].sort();
  const failed = (i: number) => Object.values(b[i].failures).reduce((a, v) => a + v, 0);
  const runSeries: Series[] = [
    { name: "succeeded", values: b.map((x, i) => x.runs - failed(i)), color: "#027a48" },
    ...reasons.map((r, k) => ({ name: `failed: ${r}`, values: b.map((x) => x.failures[r] ?? 0), color: palette[k % palette.length] })),
  ];
  const rows = b.map((x, i) => h("tr", {}, h("td", {}, labels[i]), h("td", {}, String(x.runs)),
    h("td", {}, reasons.map((r) => (x.failures[r] ? `${r} ${x.failures[r]}` : "")).filter(Boolean).join(", ")),
    h("td", {}, `${x.p50_ms} / ${x.p90_ms} / ${x.p99_ms}`), h("td", {}, `${x.egress_attempts} / ${x.egress_denied}`)));
  return h("section", { "data-testid": "history" }, head,
    h("p", {}, `${b.reduce((a, x) => a + x.runs, 0)} run(s) in ${b.length} bucket(s) of ${hist.bucket}` + (hist.own_only ? "; only your own runs (you are not an approver)." : ".")),
    h("div", { class: "charts" },
      bars("chart-runs", "Runs per bucket, failures by reason", labels, runSeries, true),
      lines("chart-duration", "Duration percentiles (ms)", labels, [
        { name: "p50", values: b.map((x) => x.p50_ms), color: "#026aa2" },
        { name: "p90", values: b.map((x) => x.p90_ms), color: "#b54708" },
        { name: "p99", values: b.map((x) => x.p99_ms), color: "#b42318" },
      ], ""),
      bars("chart-egress", "Egress connections attempted and denied", labels, [
        { name: "attempted", values: b.map((x) => x.egress_attempts), color: "#4e5ba6" },
        { name: "denied", values: b.map((x) => x.egress_denied), color: "#b42318" },
      ], false)),
    rows.length ? table("The numbers behind the charts", ["Bucket (UTC)", "Runs", "Failures", "p50 / p90 / p99 ms", "Egress attempted / denied"], rows) : null);
}
