// Small DOM builders. Text is always set as text nodes, never as HTML, so
// nothing the daemon returns (skill names, args, diffs) can inject markup.

import { ApiError } from "./api";

export type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | undefined | ((ev: Event) => void)>;

function append(parent: Node, children: (Child | Child[])[]): void {
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    parent.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
  }
}

function setAttrs(e: Element, attrs: Attrs): void {
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    if (typeof v === "function") e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
}

// h builds an HTML element.
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: (Child | Child[])[]): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  setAttrs(e, attrs);
  append(e, children);
  return e;
}

const svgNS = "http://www.w3.org/2000/svg";

// s builds an SVG element.
export function s(tag: string, attrs: Attrs = {}, ...children: (Child | Child[])[]): SVGElement {
  const e = document.createElementNS(svgNS, tag) as SVGElement;
  setAttrs(e, attrs);
  append(e, children);
  return e;
}

// when formats a timestamp for people (UTC, to the second).
export function when(t: string | undefined | null): string {
  if (!t) return "";
  const d = new Date(t);
  return isNaN(d.getTime()) ? t : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

// table builds a table with a header row.
export function table(caption: string, head: string[], rows: HTMLTableRowElement[]): HTMLTableElement {
  return h("table", {}, h("caption", {}, caption), h("thead", {}, h("tr", {}, head.map((c) => h("th", { scope: "col" }, c)))), h("tbody", {}, rows));
}

// errorBox shows an API error as the daemon said it.
export function errorBox(e: unknown, testid = "error"): HTMLElement {
  const msg = e instanceof ApiError ? `${e.message} (${e.kind})` : String(e);
  return h("p", { class: "error", role: "alert", "data-testid": testid }, msg);
}

// diffView shows a unified diff with added and removed lines marked.
export function diffView(diff: string, testid: string): HTMLElement {
  return h("pre", { class: "diff", "data-testid": testid }, diff.split("\n").map((l) => {
    const cls = l.startsWith("+++") || l.startsWith("---") ? "meta" : l.startsWith("+") ? "add" : l.startsWith("-") ? "del" : l.startsWith("@@") ? "hunk" : "";
    return h("span", { class: cls }, l + "\n");
  }));
}
