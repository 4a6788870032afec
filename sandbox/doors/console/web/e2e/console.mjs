// The console's browser test, driven by TestConsoleBrowser
// (cmd/skillbox/console_integration_test.go) against a real daemon: it
// opens the pending confirmation the test's held run asked for, checks
// what the approval binds, approves it, and checks the other pages. It
// hands control back to the Go test with "WAIT <what>" lines on stdout
// and goes on when the test answers "ok" on stdin.
//
// Debian's Chromium, driven with playwright-core (no browser download).

import { chromium } from "playwright-core";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (the Go test sets it)`);
  return v;
}

const consoleURL = env("CONSOLE_URL"), nobodyURL = env("NOBODY_URL");
const confirmation = env("CONFIRMATION_ID"), session = env("SESSION_ID");
const skill = env("SKILL"), skillDigest = env("SKILL_DIGEST"), args = env("ARGS");
const artifacts = env("ARTIFACTS");
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
mkdirSync(artifacts, { recursive: true });

const input = createInterface({ input: process.stdin });
const stdin = input[Symbol.asyncIterator]();
async function handOff(what) {
  console.log(`WAIT ${what}`);
  const { value, done } = await stdin.next();
  if (done || value.trim() !== "ok") throw new Error(`the Go test answered ${JSON.stringify(value)} to ${what}`);
}
function step(msg) {
  console.log(`STEP ${msg}`);
}
function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

const profiles = [];
async function browser() {
  const dir = mkdtempSync(join(tmpdir(), "skillbox-e2e-"));
  profiles.push(dir);
  const ctx = await chromium.launchPersistentContext(dir, {
    executablePath,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
    viewport: { width: 1280, height: 900 },
  });
  ctx.setDefaultTimeout(30_000);
  const pageErrors = [];
  ctx.on("weberror", (e) => pageErrors.push(String(e.error())));
  ctx.on("console", (m) => m.type() === "error" && pageErrors.push(m.text()));
  return { ctx, pageErrors };
}

const testid = (page, id) => page.locator(`[data-testid="${id}"]`);

const root = await browser();
const nobody = await browser();
try {
  // a) The pending item shows the skill digest and args; approve it.
  const page = root.ctx.pages()[0] ?? (await root.ctx.newPage());
  await page.goto(consoleURL);
  await testid(page, "whoami").filter({ hasText: "· approver" }).waitFor();
  const row = page.locator(`[data-testid="confirmation-row"][data-id="${confirmation}"]`);
  await row.waitFor();
  await row.getByRole("link").click();
  await testid(page, "detail-skill_digest").filter({ hasText: skillDigest }).waitFor();
  await testid(page, "detail-skill").filter({ hasText: skill }).waitFor();
  await testid(page, "detail-args").filter({ hasText: args }).waitFor();
  check((await testid(page, "detail-script_sha256").textContent()).match(/[0-9a-f]{64}/), "the script's sha256 is not shown");
  const base = new URL(page.url());
  base.hash = "";
  // A second tab on the same request, opened before the decision (as a
  // second approver would have it).
  const stale = await root.ctx.newPage();
  await stale.goto(`${base}#/confirmations/${confirmation}`);
  await testid(stale, "approve").waitFor();
  await page.screenshot({ path: join(artifacts, "console-confirmation.png"), fullPage: true });
  await testid(page, "approve").click();
  await testid(page, "decision-done").filter({ hasText: "approved" }).waitFor();
  step("approved in the page");
  await handOff("held-run");

  // b) A second approval of the same item is refused, and the page says so.
  await testid(stale, "approve").click();
  const refusal = testid(stale, "decision-error");
  await refusal.waitFor();
  const msg = await refusal.textContent();
  check(/decisions are final.*\(invalid_params\)/.test(msg), `the second approval's refusal: ${msg}`);
  step(`second approval refused: ${msg}`);

  // c) A non-approver's console offers no decision.
  const np = nobody.ctx.pages()[0] ?? (await nobody.ctx.newPage());
  await np.goto(nobodyURL);
  await testid(np, "whoami").filter({ hasText: "not an approver" }).waitFor();
  await np.locator("main[data-ready]").waitFor();
  check((await testid(np, "approve").count()) === 0, "the non-approver's list offers approve");
  const nbase = new URL(np.url());
  nbase.hash = "";
  await np.goto(`${nbase}#/confirmations/${confirmation}`);
  await np.locator("main[data-ready]").waitFor();
  await np.locator('[data-testid="error"], [data-testid="not-approver"]').first().waitFor();
  check((await testid(np, "approve").count()) === 0, "the non-approver's console shows an approve button");
  step("the non-approver's console shows no approve button");

  // d) Audit search finds the run; the chain is intact.
  await page.goto(`${base}#/audit`);
  await testid(page, "filter-session").fill(session);
  await testid(page, "filter-event").fill("run.end");
  await testid(page, "search").click();
  await page.locator('[data-testid="audit-row"][data-event="run.end"]').first().waitFor();
  const runID = await page.locator('[data-testid="audit-row"][data-event="run.end"]').first().getAttribute("data-run");
  check(runID, "the run.end row names no run");
  await page.locator('[data-testid="chain-status"][data-intact="true"]').waitFor();
  step(`audit search found ${runID}; chain: ${await testid(page, "chain-status").textContent()}`);

  // Live runs: the test starts a run that prints a line every 200 ms; its
  // page shows lines arriving while it runs, and Cancel ends it.
  await handOff("live-run");
  await page.goto(`${base}#/runs`);
  const liveRow = page.locator('[data-testid="live-run-row"]');
  for (let i = 0; (await liveRow.count()) === 0; i++) {
    check(i < 120, "the live run did not show in Live runs within 60 s");
    await page.waitForTimeout(500);
    await page.getByRole("button", { name: "Refresh" }).click();
  }
  await liveRow.first().locator('[data-testid="follow"]').click();
  const ticks = () => page.evaluate(() => (document.querySelector('[data-testid="run-output"]')?.textContent?.match(/tick \d+/g) ?? []).length);
  await page.locator('[data-testid="run-output"]', { hasText: "tick 2" }).waitFor({ timeout: 60_000 });
  const seen = await ticks();
  await page.waitForFunction((n) => (document.querySelector('[data-testid="run-output"]')?.textContent?.match(/tick \d+/g) ?? []).length >= n, seen + 3);
  check(await testid(page, "run-state").getAttribute("data-state") === "running", "the run ended before Cancel");
  step(`live output: ${seen} line(s), then ${await ticks()} while the run goes on`);
  await page.screenshot({ path: join(artifacts, "console-live-run.png"), fullPage: true });
  await testid(page, "cancel").click();
  await page.locator('[data-testid="run-state"][data-state="ended"]').waitFor();
  const reason = await testid(page, "run-state").getAttribute("data-reason");
  check(reason === "cancelled", `the cancelled run ended with ${reason}: ${await testid(page, "run-state").textContent()}`);
  step(`after Cancel: ${await testid(page, "run-state").textContent()}`);
  await handOff("live-run-ended");

  // e) The skill's history draws its charts.
  await page.goto(`${base}#/skills/${encodeURIComponent(skill)}?since=1h&bucket=1m`);
  await page.locator('[data-testid="chart-runs"] rect.bar').first().waitFor();
  await page.locator('[data-testid="chart-duration"] circle.dot').first().waitFor();
  await testid(page, "chart-egress").waitFor();
  const shot = join(artifacts, "console-skill-history.png");
  await page.screenshot({ path: shot, fullPage: true });
  step(`charts drawn; screenshot ${shot}`);

  // f) After the test tampers with the log, the chain shows broken.
  await handOff("tamper");
  await page.goto(`${base}#/audit?session=${encodeURIComponent(session)}`);
  await page.reload();
  await page.locator('[data-testid="chain-status"][data-intact="false"]').waitFor();
  const broken = await testid(page, "chain-status").textContent();
  check(/BROKEN/.test(broken), `chain status after tampering: ${broken}`);
  await page.screenshot({ path: join(artifacts, "console-chain-broken.png"), fullPage: true });
  step(`chain status after tampering: ${broken}`);

  const errors = [...root.pageErrors, ...nobody.pageErrors].filter((e) => !/status of (4|5)\d\d/.test(e));
  check(errors.length === 0, `errors in the pages: ${errors.join("; ")}`);
  console.log("PASS");
} finally {
  input.close();
  await root.ctx.close().catch(() => {});
  await nobody.ctx.close().catch(() => {});
  for (const d of profiles) rmSync(d, { recursive: true, force: true });
}
