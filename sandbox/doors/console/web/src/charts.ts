// Charts drawn as inline SVG: bars (stacked or grouped) and lines over the
// history's buckets. Each chart is an <svg role="img"> with a title, and
// its numbers are also in the page's table for readers without sight.

import { h, s } from "./dom";

export interface Series { name: string; values: number[]; color: string }

const W = 640, H = 220, L = 48, R = 12, T = 12, B = 40;

function niceMax(v: number): number {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function frame(testid: string, title: string, labels: string[], max: number, unit: string, body: SVGElement[], series: Series[]): HTMLElement {
  const plotH = H - T - B;
  const y = (v: number) => T + plotH - (v / max) * plotH;
  const ticks = [0, max / 2, max].map((v) => [
    s("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid" }),
    s("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", class: "tick" }, fmt(v) + unit),
  ]);
  const step = Math.max(1, Math.ceil(labels.length / 6));
  const slot = (W - L - R) / Math.max(1, labels.length);
  const xl = labels.map((l, i) => (i % step === 0 ? s("text", { x: L + slot * (i + 0.5), y: H - B + 16, "text-anchor": "middle", class: "tick" }, l) : null));
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title, "data-testid": testid, class: "chart" },
    s("title", {}, title), ticks.flat(), s("line", { x1: L, x2: W - R, y1: y(0), y2: y(0), class: "axis" }), xl, body,
    labels.length === 0 ? s("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" }, "no runs in this period") : null);
  const legend = h("ul", { class: "legend" }, series.map((se) => h("li", {}, s("svg", { width: 12, height: 12, "aria-hidden": "true" }, s("rect", { width: 12, height: 12, fill: se.color })), " " + se.name)));
  return h("figure", {}, h("figcaption", {}, title), svg, legend);
}

function fmt(v: number): string {
  return v >= 1000 ? (v / 1000).toFixed(v % 1000 === 0 ? 0 : 1) + "k" : String(Math.round(v * 10) / 10);
}

// bars draws one bar per label: the series stacked (stacked) or side by side.
export function bars(testid: string, title: string, labels: string[], series: Series[], stacked: boolean): HTMLElement {
  const totals = labels.map((_, i) => (stacked ? series.reduce((a, se) => a + se.values[i], 0) : Math.max(0, ...series.map((se) => se.values[i]))));
  const max = niceMax(Math.max(0, ...totals));
  const plotH = H - T - B;
  const slot = (W - L - R) / Math.max(1, labels.length);
  const rects: SVGElement[] = [];
  labels.forEach((label, i) => {
    let base = 0;
    series.forEach((se, k) => {
      const v = se.values[i];
      if (v <= 0) return;
      const hgt = (v / max) * plotH;
      // Bars stay narrow when there are few buckets.
      const group = Math.min(slot * 0.8, 48);
      const bw = stacked ? group : group / series.length;
      const x = L + slot * i + (slot - group) / 2 + (stacked ? 0 : bw * k);
      const yTop = T + plotH - ((stacked ? base : 0) / max) * plotH - hgt;
      rects.push(s("rect", { x, y: yTop, width: Math.max(1, bw), height: hgt, fill: se.color, class: "bar" }, s("title", {}, `${label} ${se.name}: ${v}`)));
      if (stacked) base += v;
    });
  });
  return frame(testid, title, labels, max, "", rects, series);
}

// lines draws each series as a polyline with a dot per point.
export function lines(testid: string, title: string, labels: string[], series: Series[], unit: string): HTMLElement {
  const max = niceMax(Math.max(0, ...series.flatMap((se) => se.values)));
  const plotH = H - T - B;
  const slot = (W - L - R) / Math.max(1, labels.length);
  const body: SVGElement[] = [];
  for (const se of series) {
    const pts = se.values.map((v, i) => [L + slot * (i + 0.5), T + plotH - (v / max) * plotH] as const);
    if (pts.length > 1) body.push(s("polyline", { points: pts.map((p) => p.join(",")).join(" "), fill: "none", stroke: se.color, "stroke-width": 2, class: "line" }));
    pts.forEach((p, i) => body.push(s("circle", { cx: p[0], cy: p[1], r: 3, fill: se.color, class: "dot" }, s("title", {}, `${labels[i]} ${se.name}: ${se.values[i]}${unit}`))));
  }
  return frame(testid, title, labels, max, unit, body, series);
}
