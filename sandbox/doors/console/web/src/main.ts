// The console's pages: a hash router over the daemon's JSON API. Every
// page asks the API; the daemon decides what this uid may see and do.

import { get, type Whoami } from "./api";
import { errorBox, h } from "./dom";
import { auditPage } from "./pages/audit";
import { confirmationPage, confirmationsPage } from "./pages/confirmations";
import { historyPage } from "./pages/history";
import { proposalPage, proposalsPage } from "./pages/proposals";
import { runsPage } from "./pages/runs";

export interface Route { path: string[]; query: URLSearchParams }

export interface Ctx { who: Whoami; route: Route; go: (hash: string) => void; rerender: () => void }

type Page = (ctx: Ctx) => Promise<Node>;

function parseHash(): Route {
  const raw = location.hash.replace(/^#\/?/, "");
  const [p, q] = raw.split("?", 2);
  return { path: p.split("/").filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(q ?? "") };
}

function pick(r: Route): Page {
  const [top, id] = r.path;
  switch (top) {
    case undefined:
    case "confirmations":
      return id ? confirmationPage : confirmationsPage;
    case "audit":
      return auditPage;
    case "skills":
      return historyPage;
    case "proposals":
      return id ? proposalPage : proposalsPage;
    case "runs":
      return runsPage;
  }
  return async () => h("p", { role: "alert" }, `There is no page #/${r.path.join("/")}.`);
}

let who: Whoami | undefined;
let generation = 0;

async function render(): Promise<void> {
  const main = document.getElementById("page")!;
  const mine = ++generation;
  const route = parseHash();
  for (const a of document.querySelectorAll("nav a")) {
    const cur = (a.getAttribute("href") ?? "").slice(2) === (route.path[0] ?? "confirmations");
    if (cur) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  let node: Node;
  try {
    if (!who) {
      who = await get<Whoami>("/whoami");
      document.getElementById("whoami")!.textContent = `uid ${who.uid}` + (who.approver ? " · approver" : " · not an approver");
    }
    const ctx: Ctx = { who, route, go: (hash) => (location.hash = hash), rerender: () => void render() };
    node = await pick(route)(ctx);
  } catch (e) {
    node = errorBox(e);
  }
  if (mine !== generation) return; // a newer navigation won
  main.replaceChildren(node);
  main.setAttribute("data-ready", String(mine));
}

window.addEventListener("hashchange", () => void render());
window.addEventListener("DOMContentLoaded", () => void render());
