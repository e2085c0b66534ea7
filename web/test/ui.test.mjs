// The browser test of `looprun ui` (make test-ui): Debian's chromium,
// driven by playwright-core, against the real binary serving real runs.
// LOOPRUN is the binary; SCREENSHOT, when set, is where a picture of a
// run's page goes (the README's).
import { chromium } from "playwright-core";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import assert from "node:assert/strict";

const root = resolve(import.meta.dirname, "../..");
const looprun = process.env.LOOPRUN || join(root, "bin", "looprun");
const dir = mkdtempSync(join(tmpdir(), "looprun-ui-"));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

writeFileSync(join(dir, "count.yaml"), `name: count
initial: check
states:
  check:
    action: 'n=$(cat n 2>/dev/null || echo 0); echo "n=$n"; test "$n" -ge 5'
    on_yes: done
    on_no: bump
  bump:
    action: 'n=$(cat n 2>/dev/null || echo 0); echo $((n+1)) > n'
    next: check
  done:
    terminal: true
`);
writeFileSync(join(dir, "gate.yaml"), `name: gate
initial: wait
states:
  wait:
    action: 'touch waiting; until [ -f go ]; do sleep 0.05; done; echo opened'
    next: done
  done:
    terminal: true
`);
execFileSync(looprun, ["run", "-q", "count.yaml"], { cwd: dir });
execFileSync("go", ["run", "./bench/uibench", "-dir", dir], { cwd: root, stdio: "inherit" });

const server = spawn(looprun, ["ui", "--listen", "127.0.0.1:0"], { cwd: dir });
const url = await new Promise((ok, fail) => {
  server.stdout.on("data", (b) => { const m = String(b).match(/http:\/\/\S+\//); if (m) ok(m[0]); });
  server.on("exit", (code) => fail(new Error(`looprun ui exited ${code}`)));
});
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"],
});
let failed = false;
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on("pageerror", (e) => { failed = true; console.error("page error:", e); });

  // The list, and its filter.
  await page.goto(url);
  await page.waitForSelector('tr[data-loop="count"]');
  assert.equal((await page.textContent('tr[data-loop="count"] td.phase')).trim(), "Completed");
  assert.equal(await page.locator("tbody tr").count(), 2);
  await page.fill("input[type=search]", "bi");
  assert.equal(await page.locator("tbody tr").count(), 1);
  assert.ok(await page.isVisible('tr[data-loop="big"]'));
  await page.fill("input[type=search]", "");

  // A run's page: the graph, where it ended, the edges taken.
  await page.click('tr[data-loop="count"] a');
  await page.waitForSelector('g.node[data-state="check"]');
  assert.equal(await page.locator("g.node").count(), 3);
  assert.ok(await page.isVisible('g.node.current[data-state="done"]'), "the final state is highlighted");
  assert.ok(await page.isVisible('g.node.terminal[data-state="done"]'));
  assert.match(await page.textContent('g.edge[data-from="check"][data-to="bump"] text'), /×5/);
  assert.match(await page.textContent("#timeline"), /4 more passes of 2 states/);
  // A state's last output and verdict.
  await page.click('g.node[data-state="check"]');
  await page.waitForSelector("#state pre.output");
  assert.match(await page.textContent("#state"), /n=5/);
  assert.match(await page.textContent("#state"), /Verdict: success/);
  if (process.env.SCREENSHOT) await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });

  // Live: a run waiting at its gate moves on the page without a reload.
  const gated = spawn(looprun, ["run", "-q", "gate.yaml"], { cwd: dir, stdio: "ignore" });
  const gatedExit = new Promise((ok) => gated.on("exit", ok));
  for (let i = 0; i < 200 && !existsSync(join(dir, "waiting")); i++) await sleep(50);
  await page.goto(`${url}#/local/gate`);
  await page.waitForSelector('g.node.current[data-state="wait"]');
  await page.waitForSelector("#live.on");
  writeFileSync(join(dir, "go"), "");
  await page.waitForSelector('g.node.current[data-state="done"]', { timeout: 20000 });
  assert.match(await page.textContent(".facts"), /Completed/);
  assert.equal(await gatedExit, 0);

  // 128 states, 10,000 iterations: the first paint (graph and timeline)
  // within a second, the timeline paged.
  await page.goto(url);
  await page.waitForSelector('tr[data-loop="big"]');
  const started = Date.now();
  await page.goto(`${url}#/local/big`);
  await page.waitForFunction(() => document.querySelectorAll("g.node").length === 128 && document.querySelectorAll("tr.visit").length > 0);
  const paint = Date.now() - started;
  console.log(`first paint of 128 states and 10000 iterations: ${paint} ms`);
  assert.ok(paint < 1000, `first paint took ${paint} ms`);
  assert.ok(await page.isVisible("text=Older"), "the timeline is paged");
  assert.ok((await page.locator("tr.visit").count()) <= 200);
} catch (e) {
  failed = true;
  console.error(e);
} finally {
  await browser.close();
  server.kill();
}
if (failed) process.exit(1);
console.log("ui: ok");
