// The front end of `looprun ui`: a list of runs and, for one run, its
// state graph (laid out by dagre), where it is, a state's last outputs and
// the timeline, kept live by the server's events.
import dagre from "@dagrejs/dagre";

const app = document.getElementById("app");
const crumb = document.getElementById("crumb");
const live = document.getElementById("live");
let stream = null;
// generation counts the pages routed to: a page whose data comes after the
// viewer went on to another draws nothing.
let generation = 0;

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c != null) el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  for (const c of children) if (c != null) el.append(c instanceof Node ? c : String(c));
  return el;
}

async function getJSON(path) {
  const resp = await fetch(path);
  if (!resp.ok) throw new Error(`${path}: ${resp.status} ${await resp.text()}`);
  return resp.json();
}

function ago(t) {
  if (!t) return "";
  const s = Math.max(0, (Date.now() - new Date(t).getTime()) / 1000);
  if (s < 60) return `${Math.round(s)}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  if (s < 86400) return `${Math.round(s / 3600)}h ago`;
  return `${Math.round(s / 86400)}d ago`;
}

// utc is a time as the CLI prints it: 24-hour UTC, "2006-01-02 15:04:05 UTC".
function utc(t) {
  const d = new Date(t);
  return t && !Number.isNaN(d.getTime()) ? `${d.toISOString().slice(0, 19).replace("T", " ")} UTC` : "";
}

// clock is a time of the day in UTC, "15:04:05", as the CLI's event rows.
function clock(t) {
  const d = new Date(t);
  return t && !Number.isNaN(d.getTime()) ? d.toISOString().slice(11, 19) : "";
}

// when is a time and how long ago, as looprun status prints it.
function when(t) {
  return t ? `${utc(t)} (${ago(t)})` : "";
}

function duration(ms) {
  if (ms == null) return "";
  if (ms < 1000) return `${ms}ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${Math.round(s % 60)}s`;
  return `${Math.floor(m / 60)}h${m % 60}m`;
}

function closeStream() {
  if (stream) stream.close();
  stream = null;
  live.classList.remove("on");
}

// The list of runs, filtered as typed.
async function listPage(gen) {
  closeStream();
  crumb.textContent = "";
  const { loops, problems = [] } = await getJSON("/api/loops");
  if (gen !== generation) return;
  const filter = h("input", { type: "search", placeholder: "filter by name, phase or state", "aria-label": "filter" });
  const body = h("tbody");
  const draw = () => {
    const q = filter.value.toLowerCase();
    body.replaceChildren(...loops
      .filter((l) => !q || `${l.name} ${l.phase} ${l.state}`.toLowerCase().includes(q))
      .map((l) => h("tr", { class: "row", "data-loop": l.name, "data-source": l.source, onclick: () => { location.hash = link(l); } },
        h("td", {}, h("a", { href: link(l) }, l.name)),
        h("td", { class: "muted" }, l.source === "cluster" ? l.namespace : "local"),
        h("td", { class: `phase ${l.phase}` }, l.phase),
        h("td", {}, l.state),
        h("td", {}, l.iteration),
        h("td", { class: "time" }, when(l.started)),
        h("td", { class: "time" }, when(l.updated)))));
  };
  filter.addEventListener("input", draw);
  draw();
  app.replaceChildren(
    h("h2", {}, "Loops"),
    ...problems.map((p) => h("p", { class: "problem" }, p)),
    loops.length ? filter : h("p", { class: "muted" }, "No runs under .loops yet: looprun run LOOP starts one."),
    h("table", {}, h("thead", {}, h("tr", {}, ["Name", "Where", "Phase", "State", "Iteration", "Started", "Updated"].map((c) => h("th", {}, c)))), body));
}

// link is the page of a listed loop.
function link(l) {
  return l.source === "cluster" ? `#/cluster/${encodeURIComponent(l.namespace)}/${encodeURIComponent(l.name)}` : `#/local/${encodeURIComponent(l.name)}`;
}

// A run's page: base is its API path.
async function loopPage(gen, base, name) {
  closeStream();
  crumb.textContent = `/ ${name}`;
  const state = { selected: null, detail: null, pages: [], pods: {} };
  const facts = h("div", { class: "facts" });
  const approval = h("div");
  const graphBox = h("div", { id: "graph", class: "panel" });
  const side = h("div", { class: "panel", id: "state" });
  const timeline = h("div", { class: "panel", id: "timeline" });
  const exitHook = h("div", { id: "exithook" });
  app.replaceChildren(h("h2", {}, name), facts, approval,
    h("div", { class: "layout" }, graphBox, side), exitHook, h("h3", {}, "Timeline"), timeline);

  const refresh = async () => {
    state.detail = await getJSON(base);
    const first = await getJSON(`${base}/timeline`);
    state.pages = [first];
    render();
  };
  const render = () => {
    const d = state.detail;
    drawFacts(facts, d);
    drawApproval(approval, d, base, refresh);
    drawGraph(graphBox, d, state.selected, (s) => { state.selected = s; render(); });
    drawState(side, d, state.selected || d.state, base, state.pods);
    drawExitHook(exitHook, d, base, state.pods);
    drawTimeline(timeline, state, base, render);
  };
  await refresh();
  if (gen !== generation) return;
  stream = new EventSource(`${base}/stream`);
  stream.onopen = () => live.classList.add("on");
  stream.onerror = () => live.classList.remove("on");
  // The page is drawn again when the run logs an event, or its exit hook
  // (which runs after its last event) moves.
  const seen = (seq, hook) => `${seq}/${hook || ""}`;
  let last = seen(state.detail.lastSeq, state.detail.exitHook?.phase);
  stream.addEventListener("update", (ev) => {
    const u = JSON.parse(ev.data);
    if (seen(u.lastSeq, u.exitHook) !== last) {
      last = seen(u.lastSeq, u.exitHook);
      refresh().catch((e) => console.error(e));
    }
  });
}

function drawFacts(box, d) {
  const fact = (label, value, attrs = {}) => h("div", attrs, h("b", {}, label), value);
  const items = [
    fact("Phase", d.phase + (d.terminatedBy ? ` (${d.terminatedBy})` : ""), { class: `phase ${d.phase}` }),
    fact("State", d.state, { id: "current" }),
    fact("Iteration", `${d.iteration} of ${d.maxIterations}`),
    fact("Started", utc(d.started), { id: "started" }),
    fact("Elapsed", duration(d.elapsedMs) + (d.timeoutMs ? ` of ${duration(d.timeoutMs)}` : "")),
  ];
  if (d.usage) {
    items.push(fact("Usage", `${d.usage.inputTokens} in / ${d.usage.outputTokens} out tokens, $${d.usage.costUSD.toFixed(4)}` +
      (d.usage.maxCostUSD ? ` of $${d.usage.maxCostUSD}` : "")));
  }
  if (d.message) items.push(fact("Message", d.message));
  box.replaceChildren(...items);
}

// drawApproval shows the approval a run waits for: who may answer, the
// command, and the buttons when this viewer may answer it here.
function drawApproval(box, d, base, refresh) {
  if (!d.approval) { box.replaceChildren(); return; }
  const a = d.approval;
  const note = h("p", { class: "muted", id: "answer-note" });
  const parts = [h("b", {}, `State ${a.state} waits for an approval`),
    // The question as asked: it may hold an agent's output, so it is text,
    // never markup.
    a.message ? h("p", { class: "question" }, a.message) : null,
    h("p", {}, `Who may answer: ${a.who}.`),
    h("p", {}, "The command that answers it:"), h("pre", {}, a.command)];
  if (a.canAnswer) {
    const message = h("input", { type: "text", id: "answer-message", placeholder: "why (kept in the event log)", "aria-label": "why" });
    const send = (approve) => async () => {
      note.textContent = "Sending…";
      const resp = await fetch(`${base}/approval`, {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-Looprun-Answer": "1" },
        // The approval shown: a page gone stale answers nothing.
        body: JSON.stringify({ approve, message: message.value, run: a.run, state: a.state, iteration: a.iteration }),
      });
      if (!resp.ok) { note.textContent = `Not answered: ${await resp.text()}`; return; }
      const ans = await resp.json();
      note.textContent = `${ans.approved ? "Approved" : "Rejected"} state ${ans.state} (iteration ${ans.iteration}); the run goes on.`;
      refresh().catch((e) => console.error(e));
    };
    parts.push(h("div", { class: "answer" }, message,
      h("button", { id: "approve", class: "approve", onclick: send(true) }, "Approve"),
      h("button", { id: "reject", class: "reject", onclick: send(false) }, "Reject")), note);
  }
  box.replaceChildren(h("div", { class: "approval" }, ...parts));
}

// drawGraph lays the states out with dagre and draws them as SVG: the
// current state highlighted, terminal and failure states marked, each edge
// with its verdicts and how often the run took it.
function drawGraph(box, d, selected, select) {
  const g = new dagre.graphlib.Graph({ multigraph: false });
  g.setGraph({ rankdir: "TB", nodesep: 30, ranksep: 40, marginx: 10, marginy: 10 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const n of d.nodes) g.setNode(n.name, { width: Math.max(90, n.name.length * 7.5 + 24), height: 40 });
  for (const e of d.edges) {
    if (e.from === e.to) continue; // drawn as a loop mark on the node
    g.setEdge(e.from, e.to, { label: edgeLabel(e), width: edgeLabel(e).length * 6, height: 14, labelpos: "c" });
  }
  dagre.layout(g);
  const { width, height } = g.graph();
  const root = svg("svg", { width: width + 20, height: height + 20, viewBox: `0 0 ${width + 20} ${height + 20}`, role: "img", "aria-label": "state graph" });
  root.append(svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
    svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#4b5563" }))));
  for (const e of d.edges) {
    if (e.from === e.to) continue;
    const ge = g.edge(e.from, e.to);
    const pts = ge.points.map((p) => `${p.x},${p.y}`).join(" L ");
    root.append(svg("g", { class: `edge${e.count ? " taken" : ""}`, "data-from": e.from, "data-to": e.to },
      svg("path", { d: `M ${pts}`, "marker-end": "url(#arrow)" }),
      svg("text", { x: ge.x, y: ge.y, "text-anchor": "middle" }, edgeLabel(e))));
  }
  for (const n of d.nodes) {
    const gn = g.node(n.name);
    const cls = ["node", n.terminal ? "terminal" : "", n.failure ? "failure" : "", n.name === d.state ? "current" : "",
      n.name === selected ? "selected" : "", n.visits ? "" : "unvisited"].filter(Boolean).join(" ");
    const self = d.edges.find((e) => e.from === n.name && e.to === n.name);
    const group = svg("g", { class: cls, "data-state": n.name, transform: `translate(${gn.x - gn.width / 2},${gn.y - gn.height / 2})` },
      svg("rect", { width: gn.width, height: gn.height }),
      svg("text", { x: gn.width / 2, y: 15 }, n.name),
      svg("text", { class: "kind", x: gn.width / 2, y: 30 }, `${n.kind}${n.visits ? ` · ${n.visits}×` : ""}${self ? ` · ↻ ${self.count}` : ""}`));
    group.addEventListener("click", () => select(n.name));
    root.append(group);
  }
  box.replaceChildren(root);
}

function edgeLabel(e) {
  return e.count ? `${e.label} ×${e.count}` : e.label;
}

// drawState shows a state: its action, what it last printed, its verdict,
// and for a cluster Loop the Pod it ran in last, with its log.
function drawState(box, d, name, base, pods) {
  const n = d.nodes.find((x) => x.name === name);
  if (!n) { box.replaceChildren(h("p", { class: "muted" }, "Select a state.")); return; }
  const last = (d.states || {})[name];
  const parts = [h("h3", {}, `State ${n.name}`),
    h("p", { class: "muted" }, `${n.kind}${n.initial ? ", initial" : ""}${n.terminal ? (n.failure ? ", failure terminal" : ", terminal") : ""}, entered ${n.visits}×`)];
  if (n.loop) parts.push(h("p", {}, `Runs the loop ${n.loop}`));
  if (last && last.child) {
    // The child's page: a Loop of the same namespace, or a run beside this one.
    const href = base.replace(/^\/api\/loops\//, "#/").replace(/[^/]+$/, encodeURIComponent(last.child));
    parts.push(h("p", {}, "Its last child run: ", h("a", { href, class: "child" }, last.child)));
  }
  if (n.action) parts.push(h("b", {}, "Action"), h("pre", {}, n.action));
  if (last && last.question) parts.push(h("b", {}, `Asked (iteration ${last.iteration})`), h("p", { class: "question" }, last.question));
  if (last && (last.exitCode != null || last.output || last.stderr || last.verdict || last.details)) {
    parts.push(h("b", {}, `Last run (iteration ${last.iteration})${last.exitCode != null ? `, exit ${last.exitCode}` : ""}`));
    if (last.output) parts.push(h("pre", { class: "output" }, last.output));
    if (last.stderr) parts.push(h("pre", {}, last.stderr));
    if (last.verdict) parts.push(h("p", {}, h("b", {}, "Verdict: "), last.verdict));
    if (last.details) parts.push(h("pre", {}, JSON.stringify(last.details, null, 2)));
  }
  if (base.startsWith("/api/loops/cluster/") && n.kind !== "none" && n.kind !== "approval" && n.kind !== "loop") {
    parts.push(podPanel(base, name, pods));
  }
  box.replaceChildren(...parts);
}

// podPanel is the Pod a cluster Loop's state (or its exit hook, on-exit)
// ran in last, and its log's tail, read as the viewer.
function podPanel(base, name, pods) {
  const pod = h("div", { class: "pod" });
  const show = (p) => {
    const parts = [];
    if (p.pod) {
      parts.push(h("b", {}, `Pod ${p.pod}`), h("span", { class: "muted" }, ` ${p.phase}, iteration ${p.iteration}`));
      if (p.log) parts.push(h("pre", { class: "log" }, p.log));
      else if (!p.problem) parts.push(h("p", { class: "muted no-log" }, "no output yet"));
    }
    if (p.problem) parts.push(h("p", { class: "muted" }, p.problem));
    pod.replaceChildren(...parts);
  };
  if (pods[name]) show(pods[name]);
  getJSON(`${base}/states/${encodeURIComponent(name)}/pod`)
    .then((p) => { pods[name] = p; show(p); })
    .catch((e) => show({ problem: `The Pod could not be read: ${e.message}` }));
  return pod;
}

// drawExitHook shows the run's exit hook (spec.onExit): its command, and
// how it went at the run's end.
function drawExitHook(box, d, base, pods) {
  const x = d.exitHook;
  if (!x) { box.replaceChildren(); return; }
  const parts = [h("h3", {}, "Exit hook")];
  if (x.action) parts.push(h("p", { class: "muted" }, `Runs once the run ends (${x.kind}):`), h("pre", { class: "command" }, x.action));
  let status = "Not run yet: it runs once the run ends.";
  if (x.phase) {
    status = x.phase;
    if (x.exitCode != null && x.phase !== "Running") status += `, exit ${x.exitCode}`;
    status += ` (the end at iteration ${x.iteration})`;
  }
  const times = [];
  if (x.startedAt) times.push(`started ${utc(x.startedAt)}`);
  if (x.finishedAt) times.push(`finished ${utc(x.finishedAt)}`);
  if (x.startedAt && x.finishedAt) {
    // A Loop's status keeps whole seconds: a hook within one took under 1s.
    const [from, to] = [new Date(x.startedAt).getTime(), new Date(x.finishedAt).getTime()];
    const coarse = from % 1000 === 0 && to % 1000 === 0;
    times.push(`took ${coarse && to - from < 1000 ? "under 1s" : duration(to - from)}`);
  }
  parts.push(h("p", { class: `status ${x.phase || ""}` }, h("b", {}, status), times.length ? ` ${times.join(", ")}` : ""));
  if (x.earlier) parts.push(h("p", { class: "muted" }, "That was at an earlier end: the run went on since, and the hook runs again when it ends."));
  if (x.message) parts.push(h("pre", { class: "message" }, x.message));
  if (x.pod && base.startsWith("/api/loops/cluster/")) parts.push(podPanel(base, "on-exit", pods));
  box.replaceChildren(h("div", { class: "panel" }, ...parts));
}

// drawTimeline shows the state visits of the run's current timeline,
// newest first; a rewind is a row where it went back (what it abandoned
// is not shown).
function drawTimeline(box, state, base, render) {
  const rows = state.pages.flatMap((p) => p.visits || []);
  const total = state.pages[0]?.total ?? 0;
  const older = state.pages[state.pages.length - 1]?.before;
  const rewinds = [...(state.detail.rewinds || [])].sort((a, b) => b.seq - a.seq);
  const body = [];
  let r = 0;
  const rewindsAfter = (seq) => {
    for (; r < rewinds.length && rewinds[r].seq > seq; r++) body.push(rewindRow(rewinds[r]));
  };
  for (const v of rows) {
    rewindsAfter(v.seq);
    body.push(h("tr", { class: "visit" },
      h("td", {}, v.iteration), h("td", {}, v.state), h("td", { class: "at", title: utc(v.at) }, clock(v.at)),
      h("td", {}, duration(v.durationMs)), h("td", {}, v.action || ""), h("td", {}, v.exitCode != null ? v.exitCode : ""),
      h("td", {}, v.verdict || ""), h("td", {}, v.next || ""),
      h("td", { class: "repeat" }, v.repeat ? `↻ ${v.repeat} more pass${v.repeat > 1 ? "es" : ""} of ${v.period} state${v.period > 1 ? "s" : ""}` : "")));
  }
  if (!older) rewindsAfter(0);
  const more = older ? h("button", { onclick: async () => {
    state.pages.push(await getJSON(`${base}/timeline?before=${older}`));
    render();
  } }, "Older") : null;
  const note = rewinds.length ? "; the run was rewound: the graph's counts and these rows are of its current timeline" : "";
  box.replaceChildren(
    h("p", { class: "muted" }, `${rows.length} of ${total} rows, newest first; identical passes folded${note}`),
    h("table", {}, h("thead", {}, h("tr", {}, ["#", "State", "At (UTC)", "Took", "Action", "Exit", "Verdict", "Next", ""].map((c) => h("th", {}, c)))),
      h("tbody", {}, body)), ...(more ? [more] : []));
}

// rewindRow marks where the run was rewound in the timeline.
function rewindRow(w) {
  const abandoned = w.abandoned ? `: ${w.abandoned} state visit${w.abandoned > 1 ? "s" : ""} after it abandoned, not shown` : "";
  return h("tr", { class: "rewind", "data-seq": w.seq },
    h("td", { colspan: 9 }, `↶ ${utc(w.at)}: rewound from iteration ${w.fromIteration}${w.fromState ? ` (${w.fromState})` : ""} ` +
      `back to the checkpoint of iteration ${w.iteration}, on to ${w.state}${abandoned}`));
}

async function route() {
  const gen = ++generation;
  const local = location.hash.match(/^#\/local\/([^/]+)$/);
  const cluster = location.hash.match(/^#\/cluster\/([^/]+)\/([^/]+)$/);
  try {
    if (local) await loopPage(gen, `/api/loops/local/${local[1]}`, decodeURIComponent(local[1]));
    else if (cluster) await loopPage(gen, `/api/loops/cluster/${cluster[1]}/${cluster[2]}`, `${decodeURIComponent(cluster[1])}/${decodeURIComponent(cluster[2])}`);
    else await listPage(gen);
  } catch (e) {
    if (gen === generation) app.replaceChildren(h("p", { class: "error" }, String(e.message || e)));
  }
}

window.addEventListener("hashchange", route);
route();
