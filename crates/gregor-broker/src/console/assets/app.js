// Gregor's console, read-only unless the broker's console.actions.enable is set. Plain DOM, no framework: every string from the broker goes into the
// page as text (textContent), never as HTML, since group, client and topic names are chosen by
// clients. Pages are selected by the URL fragment (#/brokers, #/topics, #/groups,
// #/group/<id>, #/transactions, #/messages?topic=...) and refreshed every REFRESH_MS from the
// JSON under /ui/api/ (the Messages page only when asked: it reads records).
"use strict";

const REFRESH_MS = 2000;
let timer = null;
let generation = 0; // drops answers that arrive after the page changed

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else if (k === "style") Object.assign(el.style, v); // CSSOM: allowed by the page's CSP
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function table(headers, rows, attrs) {
  return h("table", attrs,
    h("thead", null, h("tr", null, headers.map(([label, cls]) => h("th", { class: cls }, label)))),
    h("tbody", null, rows));
}

const num = (v) => (v === null || v === undefined ? "—" : Number(v).toLocaleString("en-US"));
const ids = (xs) => (xs && xs.length ? xs.join(", ") : "—");
const ms = (v) => (v === null || v === undefined ? "—" : v < 1000 ? `${v} ms` : `${(v / 1000).toFixed(2)} s`);
const when = (t) => (t ? new Date(t).toISOString().replace("T", " ").replace("Z", " UTC") : "—");
const groupHref = (id) => `#/group/${encodeURIComponent(id)}`;
const tps = (ps) => (ps && ps.length ? ps.map((p) => `${p.topic}-${p.partition}`).join(", ") : "—");

function memberLabel(m) {
  if (!m) return "—";
  const short = m.member_id.length > 14 ? `…${m.member_id.slice(-8)}` : m.member_id;
  return `${m.client_id || "?"} (${short})`;
}

async function getJson(path) {
  const r = await fetch(path, { cache: "no-store" });
  const text = await r.text();
  if (!r.ok) throw new Error(`${path}: ${r.status} ${text.trim()}`);
  return JSON.parse(text);
}

function setStatus(text, error) {
  const s = document.getElementById("status");
  s.textContent = text;
  s.className = error ? "error" : "";
}

// ---- actions (console.actions.enable) --------------------------------------------------------

// Whether the serving node's console may act; the page shows no action controls otherwise.
const actionsStatus = () => getJson("/ui/api/actions").catch(() => ({ enabled: false }));

// POSTs an action as JSON with the header only this page's script sends (the broker refuses
// cross-site requests without it), then shows Kafka's answer and redraws the page.
async function postAction(name, body) {
  const box = document.getElementById("action-result");
  box.hidden = false;
  box.className = "";
  box.textContent = `${name}: sent…`;
  try {
    const r = await fetch(`/ui/api/actions/${name}`, {
      method: "POST", cache: "no-store",
      headers: { "Content-Type": "application/json", "X-Gregor-Console": "1" },
      body: JSON.stringify(body),
    });
    const v = JSON.parse(await r.text());
    const lines = v.results ? v.results.map((x) => `${JSON.stringify(x.resource)}: ${x.error}` +
      (x.error_code ? ` (code ${x.error_code})` : "") + (x.message ? ` — ${x.message}` : "")) : [v.error];
    box.className = v.ok ? "ok" : "error";
    box.textContent = `${name} as ${v.principal || "?"}: ${v.ok ? "done" : "failed"}. ${lines.join("; ")}`;
  } catch (e) {
    box.className = "error";
    box.textContent = `${name}: ${e.message}`;
  }
  refresh();
}

function actionButton(id, label, onClick, attrs) {
  const b = h("button", { type: "button", id, class: "action", ...attrs }, label);
  b.addEventListener("click", onClick);
  return b;
}

function topicActions() {
  const name = h("input", { id: "new-topic-name", placeholder: "topic name", "aria-label": "topic name" });
  const parts = h("input", { id: "new-topic-partitions", type: "number", min: 1, value: 1, "aria-label": "partitions" });
  const rf = h("input", { id: "new-topic-replication", type: "number", min: 1, value: 1, "aria-label": "replication factor" });
  const create = actionButton("create-topic", "Create topic", () => postAction("create-topic",
    { topic: name.value, partitions: Number(parts.value), replication_factor: Number(rf.value) }));
  const elect = actionButton("elect-all", "Elect preferred leaders (all partitions)",
    () => postAction("elect-leaders", {}));
  return h("section", { class: "card actions", id: "topic-actions" }, h("h3", null, "Actions"),
    h("div", { class: "controls" }, name, " partitions ", parts, " replication factor ", rf, create), elect);
}

function oneTopicActions(t) {
  if (t.internal) return null;
  const del = actionButton(null, "Delete topic", () => {
    if (confirm(`Delete topic ${t.name} and all its records?`)) postAction("delete-topic", { topic: t.name });
  }, { "data-action": "delete-topic" });
  const elect = actionButton(null, "Elect preferred leaders", () => postAction("elect-leaders", { topic: t.name }),
    { "data-action": "elect-leaders" });
  return h("div", { class: "controls actions" }, del, " ", elect);
}

function resetActions(g) {
  const topics = [...new Set(g.offsets.map((o) => o.topic))];
  const topic = h("input", { id: "reset-topic", value: topics[0] || "", placeholder: "topic", "aria-label": "topic" });
  const to = select("reset-to", [["earliest", "earliest"], ["latest", "latest"], ["offset", "an offset"]], "earliest");
  const offset = h("input", { id: "reset-offset", type: "number", min: 0, placeholder: "offset", "aria-label": "offset" });
  const go = actionButton("reset-offsets", "Reset offsets", () => {
    const body = { group: g.group_id, topic: topic.value, to: to.value };
    if (to.value === "offset") body.offset = Number(offset.value);
    postAction("reset-offsets", body);
  });
  return h("section", { class: "card actions", id: "group-actions" }, h("h3", null, "Reset offsets"),
    h("div", { class: "controls" }, "topic ", topic, " to ", to, " ", offset, go),
    h("p", { class: "muted" }, "Only an empty group (no members) can be reset, as kafka-consumer-groups.sh refuses a live one."));
}

// ---- pages ---------------------------------------------------------------------------------

// A broker's state: the metadata's fencing, and whether its listener answered this page's probe.
const LIVENESS = {
  alive: ["ok", "alive"],
  fenced: ["fenced", "fenced"],
  unreachable: ["fenced", "unreachable"],
  "not answering": ["under", "not answering"],
  unfenced: ["", "unfenced"],
};

function card(value, label, attrs) {
  return h("div", attrs, h("b", null, value), label);
}

function brokersPage(c) {
  const rows = c.brokers.map((b) => {
    const [cls, text] = LIVENESS[b.liveness] || ["", b.liveness];
    const why = b.fenced ? "fenced by the controller (metadata)"
      : `unfenced in the metadata; its listener: ${b.reachability}`;
    return h("tr", { "data-broker": b.id, "data-liveness": b.liveness },
      h("td", { class: "num" }, h("a", { href: `#/broker/${b.id}`, class: "broker-link" }, b.id)),
      h("td", { class: "mono" }, b.endpoints.map((e) => `${e.name}://${e.host}:${e.port}`).join(" ")),
      h("td", null, b.rack || "—"),
      h("td", null,
        b.controller ? h("span", { class: "badge controller" }, "active controller") : null,
        h("span", { class: `badge ${cls}`, title: why }, text),
        b.this_node ? h("span", { class: "badge" }, "serving this page") : null));
  });
  const s = c.summary;
  const down = s.fenced + s.unreachable;
  return [
    h("h2", null, "Brokers"),
    h("div", { class: "summary", id: "broker-summary" },
      card(`${s.alive} of ${s.brokers}`, "brokers alive", { id: "brokers-alive", class: down ? "bad" : null }),
      card(s.fenced, "fenced", { id: "brokers-fenced" }),
      card(s.unreachable, "unreachable (unfenced, listener refuses or does not answer)", { id: "brokers-unreachable" }),
      h("div", { id: "controller-card" }, "active controller",
        h("b", { id: "controller-id" }, c.controller_id === null ? "none" : `node ${c.controller_id}`)),
      card(s.under_replicated, "under-replicated partitions (ISR smaller than replicas)",
        { id: "under-replicated-count", class: s.under_replicated ? "warn" : null }),
      card(s.offline, "offline partitions (no leader, or a fenced one)",
        { id: "offline-count", class: s.offline ? "bad" : null }),
      card(s.leader_unreachable, "partitions whose leader is unreachable",
        { id: "leader-unreachable-count", class: s.leader_unreachable ? "bad" : null })),
    table([["id", "num"], ["listeners"], ["rack"], ["state"]], rows, { id: "brokers" }),
    h("p", { class: "muted" }, `Cluster ${c.cluster_id}; metadata as applied by node ${c.node_id} (index ${c.applied_index}). ` +
      "A broker is alive when the metadata has it unfenced and its client listener accepted a connection from " +
      `node ${c.node_id} just now; partition counts cover the topics shown. ` +
      "Click a broker's id for its version, uptime, disk space and configs."),
  ];
}

const duration = (v) => {
  if (v === null || v === undefined) return "—";
  const s = Math.floor(v / 1000);
  const d = Math.floor(s / 86400), hh = Math.floor((s % 86400) / 3600), mm = Math.floor((s % 3600) / 60);
  return d ? `${d}d ${hh}h ${mm}m` : hh ? `${hh}h ${mm}m` : mm ? `${mm}m ${s % 60}s` : `${s % 60}s`;
};

// Configs as DescribeConfigs answers them: effective value and source; a sensitive value is
// never sent by the broker. Values set anywhere but the built-in default are marked.
function configsTable(configs, id) {
  const rows = configs.map((c) => h("tr", { "data-config": c.name, "data-source": c.source, class: c.source === "DEFAULT_CONFIG" ? null : "set" },
    h("td", { class: "mono" }, c.name),
    h("td", { class: "mono config-value" }, c.sensitive ? h("span", { class: "muted" }, "(sensitive, hidden)") : c.value ?? "null"),
    h("td", null, h("span", { class: `badge source-${c.source}` }, c.source)),
    h("td", null, c.read_only ? "read-only" : "dynamic")));
  return table([["config"], ["value"], ["source"], [""]], rows, { id, class: "configs" });
}

// One broker: read by the node serving the page from that broker's own console.
function brokerPage(d) {
  const dirs = (d.log_dirs || []).map((x) => h("tr", { "data-log-dir": x.path },
    h("td", { class: "mono" }, x.path),
    x.error ? h("td", { colspan: 4, class: "bad" }, x.error) : [
      sizeCell(x.free_bytes, { class: "num free" }), sizeCell(x.used_bytes), sizeCell(x.total_bytes, { class: "num total" }),
      h("td", { class: "num" }, x.total_bytes ? `${((100 * x.used_bytes) / x.total_bytes).toFixed(1)} %` : "—")]));
  const set = (d.configs || []).filter((c) => c.source !== "DEFAULT_CONFIG").length;
  return [
    h("h2", null, "Broker ", h("span", { id: "broker-id" }, d.broker_id)),
    h("div", { class: "summary", id: "broker-facts" },
      h("div", null, h("b", { id: "broker-version" }, d.version), "version"),
      h("div", null, h("b", { id: "broker-commit", class: "mono", title: d.commit }, d.commit.slice(0, 12)), "commit"),
      h("div", null, h("b", { id: "broker-uptime", "data-ms": d.uptime_ms }, duration(d.uptime_ms)), `up since ${when(d.started_ms)}`)),
    h("h3", null, "Disk space per data directory"),
    d.log_dirs ? table([["directory"], ["free", "num"], ["used", "num"], ["total", "num"], ["used %", "num"]], dirs, { id: "log-dirs" })
      : h("p", { class: "muted", id: "log-dirs-error" }, d.log_dirs_error),
    h("h3", null, "Configs"),
    d.configs ? [h("p", { class: "muted" }, `${d.configs.length} configs, ${set} set other than by default. ` +
      "Sources: STATIC_BROKER_CONFIG (the properties file or --override), DYNAMIC_BROKER_CONFIG (set for this broker), " +
      "DYNAMIC_DEFAULT_BROKER_CONFIG (set for all brokers), DEFAULT_CONFIG (built in)."), configsTable(d.configs, "broker-configs")]
      : h("p", { class: "muted", id: "configs-error" }, d.configs_error),
    h("p", { class: "muted" }, `Version and commit are gregor_build_info's, the start process_start_time_seconds', ` +
      "the disk space gregor_log_dir_free_bytes' and gregor_log_dir_total_bytes'; configs as DescribeConfigs of the BROKER resource answers them on that node." +
      (d.via_node !== undefined ? ` Read by node ${d.via_node} from node ${d.broker_id}'s console.` : "")),
  ];
}

// Sizes in binary units, the exact byte count in the cell's title.
function bytes(v) {
  if (v === null || v === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let x = Number(v);
  let i = 0;
  while (x >= 1024 && i < units.length - 1) { x /= 1024; i += 1; }
  return i === 0 ? `${x} B` : `${x.toFixed(x < 10 ? 2 : 1)} ${units[i]}`;
}

function sizeCell(v, attrs) {
  return h("td", { class: "num", title: v === null || v === undefined ? null : `${num(v)} bytes`, ...attrs }, bytes(v));
}

// A topic's numbers over its partitions; sizes only where the leader's are known.
function topicStats(t) {
  const sizes = t.partitions.map((p) => p.size_bytes).filter((s) => s !== null && s !== undefined);
  const total = sizes.reduce((a, b) => a + b, 0);
  const largest = sizes.length ? Math.max(...sizes) : null;
  const mean = sizes.length ? total / sizes.length : 0;
  const records = t.partitions.every((p) => p.high_watermark !== null && p.log_start_offset !== null)
    ? t.partitions.reduce((a, p) => a + (p.high_watermark - p.log_start_offset), 0) : null;
  return {
    size: sizes.length ? total : null,
    largest,
    // Partition skew: the largest partition over the mean; 1 when they are even.
    skew: mean > 0 ? largest / mean : null,
    records,
    rf: t.partitions.length ? Math.max(...t.partitions.map((p) => p.replicas.length)) : 0,
    under: t.partitions.filter((p) => p.under_replicated).length,
    offline: t.partitions.filter((p) => p.offline).length,
  };
}

// The Topics page's state lives in its URL (#/topics?q=...&internal=1&open=<topic>), so that a
// refresh keeps it and a link shows the same view.
function topicsState() {
  const p = hashParams();
  return { q: p.get("q") || "", internal: p.get("internal") === "1", open: new Set(p.getAll("open")) };
}

function setTopicsState(s) {
  const p = new URLSearchParams();
  if (s.q) p.set("q", s.q);
  if (s.internal) p.set("internal", "1");
  for (const o of s.open) p.append("open", o);
  const qs = p.toString();
  history.replaceState(null, "", `#/topics${qs ? `?${qs}` : ""}`);
}

// Shows the topics the search and the internal switch let through, in place (no redraw, so the
// search box keeps its focus).
function applyTopicFilter() {
  const s = topicsState();
  const needle = s.q.toLowerCase();
  let shown = 0;
  let total = 0;
  for (const el of document.querySelectorAll("#main [data-topic][data-internal]")) {
    const ok = (s.internal || el.dataset.internal !== "true") && el.dataset.topic.toLowerCase().includes(needle);
    el.hidden = !ok;
    if (el.tagName === "TR") { total += 1; if (ok) shown += 1; }
  }
  const count = document.getElementById("topics-shown");
  if (count) count.textContent = `${shown} of ${total} topics shown`;
}

function topicControls(s) {
  const search = h("input", { type: "search", id: "topic-search", placeholder: "search topics", value: s.q, "aria-label": "search topics" });
  search.addEventListener("input", () => { setTopicsState({ ...topicsState(), q: search.value }); applyTopicFilter(); });
  const internal = h("input", { type: "checkbox", id: "show-internal", checked: s.internal });
  internal.addEventListener("change", () => { setTopicsState({ ...topicsState(), internal: internal.checked }); applyTopicFilter(); });
  return h("div", { class: "controls" }, search,
    h("label", null, internal, " show internal topics"), h("span", { class: "muted", id: "topics-shown" }));
}

function openTopic(name) {
  const s = topicsState();
  s.open.add(name);
  setTopicsState(s);
  const d = document.querySelector(`#main section[data-topic="${CSS.escape(name)}"] details`);
  if (d) { d.open = true; d.scrollIntoView(); }
}

function topicsOverview(c) {
  const rows = c.topics.map((t) => {
    const st = topicStats(t);
    const skewed = st.skew !== null && t.partitions.length > 1 && st.skew >= 2;
    const name = h("a", { href: "#", class: "topic-name" }, t.name);
    name.addEventListener("click", (e) => { e.preventDefault(); openTopic(t.name); });
    return h("tr", { "data-topic": t.name, "data-internal": String(t.internal), class: st.offline ? "offline" : st.under ? "under-replicated" : null },
      h("td", null, name, " ", t.internal ? h("span", { class: "badge" }, "internal") : null),
      h("td", { class: "num" }, t.partitions.length),
      h("td", { class: "num" }, st.rf),
      sizeCell(st.size, { "data-bytes": st.size }),
      sizeCell(st.largest),
      h("td", { class: `num skew${skewed ? " lag-warn" : ""}`, title: "largest partition's size / mean partition size" },
        st.skew === null ? "—" : `${st.skew.toFixed(2)}×`),
      h("td", { class: "num" }, num(st.records)),
      h("td", { class: "num" }, st.under || ""),
      h("td", { class: "num" }, st.offline || ""),
      h("td", null, h("a", { href: messagesHref({ topic: t.name, partition: 0, newest: "true" }) }, "messages")));
  });
  return table([["topic"], ["partitions", "num"], ["replication", "num"], ["size", "num"], ["largest partition", "num"],
    ["skew", "num"], ["offsets", "num"], ["under-replicated", "num"], ["offline", "num"], [""]], rows, { id: "topics-overview" });
}

// A topic's configs, read for its open details (`configs`: the answer, or undefined before it).
function topicConfigs(name, configs) {
  if (!configs) return null;
  if (configs.error) return h("p", { class: "muted topic-configs-error" }, `Configs: ${configs.error}`);
  const set = configs.configs.filter((c) => c.source !== "DEFAULT_CONFIG");
  const d = h("details", { class: "topic-configs", "data-topic-configs": name, open: openConfigs.has(name) },
    h("summary", null, `Configs (${set.length} set: ${set.map((c) => c.name).join(", ") || "none"})`),
    configsTable(configs.configs, null));
  // Kept open across the page's redraws.
  d.addEventListener("toggle", () => { if (d.open) openConfigs.add(name); else openConfigs.delete(name); });
  return d;
}
const openConfigs = new Set();

function topicDetails(t, open, configs) {
  const under = t.partitions.filter((p) => p.under_replicated).length;
  const rows = t.partitions.map((p) => h("tr", {
    class: p.offline ? "offline" : p.under_replicated ? "under-replicated" : null,
    "data-partition": p.partition,
  },
    h("td", { class: "num" }, p.partition),
    h("td", { class: "num" }, p.leader >= 0 ? p.leader : "none"),
    h("td", null, ids(p.replicas)),
    h("td", null, ids(p.isr)),
    h("td", null,
      p.offline ? h("span", { class: "badge offline" }, "offline") : null,
      p.under_replicated ? h("span", { class: "badge under" }, "under-replicated") : null,
      p.adding.length ? h("span", { class: "badge" }, `adding ${ids(p.adding)}`) : null,
      p.removing.length ? h("span", { class: "badge" }, `removing ${ids(p.removing)}`) : null),
    sizeCell(p.size_bytes),
    h("td", { class: "num" }, num(p.log_start_offset)),
    h("td", { class: "num" }, num(p.high_watermark)),
    h("td", { class: "num" }, num(p.log_end_offset)),
    h("td", { class: "num" }, num(p.last_stable_offset)),
    // Only where read_committed consumers are held back: a 0 would be noise on every row.
    h("td", { class: "num lso-lag" }, p.lso_lag ? h("span", { class: "lag-warn" }, num(p.lso_lag)) : ""),
    h("td", null, h("a", { href: messagesHref({ topic: t.name, partition: p.partition, newest: "true" }) }, "messages"))));
  const details = h("details", { open },
    h("summary", null, h("h3", null, t.name, " ", t.internal ? h("span", { class: "badge" }, "internal") : null,
      under ? h("span", { class: "badge under" }, `${under} under-replicated`) : null)),
    table([["partition", "num"], ["leader", "num"], ["replicas"], ["isr"], [""], ["size", "num"],
      ["start offset", "num"], ["high watermark", "num"], ["end offset", "num"],
      ["last stable offset", "num"], ["LSO lag", "num"], [""]], rows),
    topicConfigs(t.name, configs));
  details.addEventListener("toggle", () => {
    const s = topicsState();
    const was = s.open.has(t.name);
    if (details.open) s.open.add(t.name); else s.open.delete(t.name);
    setTopicsState(s);
    if (details.open && !was && !configs) refresh(); // its configs are read for open topics only
  });
  return h("section", { class: "card", "data-topic": t.name, "data-internal": String(t.internal) }, details);
}

function topicsPage(c) {
  const s = topicsState();
  const out = [h("h2", null, "Topics"), topicControls(s)];
  if (!c.topics.length) out.push(h("p", { class: "muted" }, "No topics."));
  else out.push(topicsOverview(c), h("p", { class: "muted" }, "Click a topic for its partitions."));
  if (c.actions && c.actions.enabled) out.splice(2, 0, topicActions());
  for (const t of c.topics) {
    const section = topicDetails(t, s.open.has(t.name), (c.topic_configs || {})[t.name]);
    if (c.actions && c.actions.enabled) section.querySelector("details").append(oneTopicActions(t) || "");
    out.push(section);
  }
  const unread = (c.sizes_unread || []).map((n) => `node ${n.node_id} (${n.error})`);
  out.push(h("p", { class: "muted", id: "sizes-source" },
    `Sizes and offsets are the partition leader's: node ${c.node_id}'s own replica when it leads, else read from the leader's console. ` +
    "— when the partition has no live leader" + (unread.length ? `, or its leader could not be read: ${unread.join("; ")}` : "") + ". " +
    "Offsets = high watermark − start offset, summed over the partitions (transaction markers and aborted records included). Skew = the largest partition's size over the mean (amber from 2×). " +
    "LSO lag = high watermark − last stable offset: records read_committed consumers cannot read yet, held by an open transaction."));
  return out;
}

function transactionsPage(t) {
  const rows = t.transactions.map((x) => h("tr", { "data-transactional-id": x.transactional_id, "data-state": x.state },
    h("td", null, x.transactional_id),
    h("td", { class: "num" }, `${x.producer_id} / ${x.producer_epoch}`),
    h("td", null, h("span", { class: `badge txn-${x.state}` }, x.state)),
    h("td", null, tps(x.partitions)),
    h("td", { class: "num" }, ms(x.age_ms)),
    h("td", { class: "num" }, ms(x.timeout_ms)),
    h("td", { class: "num" }, x.coordinator_partition)));
  const states = t.states ? Object.entries(t.states).map(([s, n]) => `${s} ${n}`).join(", ") : null;
  return [
    h("h2", null, "Open transactions"),
    t.loading.length ? h("p", { class: "muted", id: "txn-loading" },
      `Coordinator shards still loading: __transaction_state partitions ${ids(t.loading)}.`) : null,
    t.transactions.length
      ? table([["transactional id"], ["producer id / epoch", "num"], ["state"], ["partitions"], ["age", "num"],
        ["timeout", "num"], ["__transaction_state partition", "num"]], rows, { id: "transactions" })
      : h("p", { class: "muted" }, "No open transactions."),
    t.truncated ? h("p", { class: "muted", id: "txn-truncated" },
      `Only the ${t.max_listed} oldest are listed` + (t.open_total !== null ? ` of ${t.open_total}.` : ".")) : null,
    states ? h("p", { class: "muted", id: "txn-states" }, `Transactional ids by state: ${states}.`) : null,
    h("p", { class: "muted" }, `Transactions whose coordinator is node ${t.node_id} (the leader of their ` +
      `__transaction_state partition: ${t.shards.length ? ids(t.shards) : "none"}), oldest first; ` +
      "as DescribeTransactions reports them. Open the console of another node for its own."),
  ];
}

function groupsPage(g) {
  const rows = g.groups.map((x) => h("tr", { "data-group": x.group_id, "data-coordinator": x.coordinator, "data-type": x.type || "classic" },
    h("td", null, h("a", { href: groupHref(x.group_id) }, x.group_id)),
    h("td", { class: "group-type" }, x.type || "classic"),
    h("td", null, h("span", { class: `badge state-${x.state}` }, x.state)),
    h("td", null, x.protocol_type ? `${x.protocol_type} / ${x.protocol || "—"}` : "—"),
    h("td", { class: "num" }, x.generation),
    h("td", { class: "num" }, x.members),
    h("td", { class: "num" }, num(x.lag_sum)),
    h("td", { class: "num" }, x.rebalances),
    h("td", { class: "num coordinator" }, x.coordinator)));
  const unread = (g.nodes || []).filter((n) => !n.ok);
  const skipped = (g.nodes || []).filter((n) => n.ok && n.skipped);
  return [
    h("h2", null, "Consumer groups"),
    unread.length ? h("div", { class: "error-box", id: "unread-nodes" },
      "Groups of these nodes are missing: ",
      unread.map((n) => `node ${n.node_id} (${n.error})`).join("; ")) : null,
    skipped.length ? h("p", { class: "muted", id: "skipped-nodes" },
      "Not asked: ", skipped.map((n) => `node ${n.node_id} (${n.skipped})`).join("; ")) : null,
    g.groups.length
      ? table([["group"], ["type"], ["state"], ["protocol"], ["generation / epoch", "num"], ["members", "num"], ["lag", "num"], ["rebalances", "num"], ["coordinator", "num"]], rows, { id: "groups" })
      : h("p", { class: "muted" }, "No groups."),
    h("p", { class: "muted" }, g.scope === "cluster"
      ? `Groups of the whole cluster, each as its coordinator (the leader of its __consumer_offsets partition) reports it; ` +
        `read by node ${g.node_id} from every live broker's console.`
      : `Groups coordinated by node ${g.node_id} (the leader of their __consumer_offsets partition).`),
  ];
}

// A bar of two phases, their widths in percent of the axis every bar of the page shares
// (computed by the broker: timeline.rs, scale_bars).
function phaseBar(firstPct, secondPct, title) {
  return h("div", { class: "bar", title },
    h("div", { class: "join", style: { width: `${firstPct || 0}%` } }),
    h("div", { class: "sync", style: { width: `${secondPct || 0}%` } }));
}

function timelineItem(r) {
  // Widths on the axis all rebalances of the page share (timeline_scale), computed by the broker.
  const joinW = r.bar ? r.bar.join_pct : 0;
  const syncW = r.bar ? r.bar.sync_pct : 0;
  const changes = [];
  for (const m of r.joined) changes.push(h("li", null, h("span", { class: "badge joined" }, "joined"), memberLabel(m)));
  for (const d of r.departed) {
    const cls = { left: "left", "session timeout": "timed-out", "rebalance timeout": "kicked", "sync timeout": "timed-out" }[d.cause] || "left";
    const text = {
      left: "left (LeaveGroup)",
      "session timeout": "timed out (session.timeout.ms)",
      "rebalance timeout": "kicked (did not rejoin within max.poll.interval.ms)",
      "sync timeout": "removed (did not sync in time)",
      "group full": "refused (group.max.size)",
      "removed by admin": "removed by an admin",
    }[d.cause] || d.cause;
    changes.push(h("li", { "data-cause": d.cause }, h("span", { class: `badge ${cls}` }, text), memberLabel(d.member)));
  }
  for (const m of r.moved) changes.push(h("li", { class: "moved" }, `${m.topic}-${m.partition} moved from ${m.from_client || m.from} to ${m.to_client || m.to}`));
  for (const v of r.revoked) changes.push(h("li", { class: "revoked" }, `revoked from ${memberLabel(v.member)}: ${tps(v.partitions)}`));
  for (const a of r.assigned) changes.push(h("li", { class: "assigned" }, `newly assigned to ${memberLabel(a.member)}: ${tps(a.partitions)}`));
  const title = r.generation !== null
    ? `generation ${r.from_generation} → ${r.generation}`
    : `from generation ${r.from_generation}`;
  return h("li", { class: r.status.replace(" ", "-"), "data-generation": r.generation ?? "", "data-status": r.status },
    h("div", null, h("span", { class: "gen-title" }, title), " ",
      h("span", { class: "badge" }, r.status), " ", h("span", { class: "muted" }, `${when(r.started_ms)} — ${r.reason || "no reason recorded"}`)),
    phaseBar(joinW, syncW, `join ${ms(r.join_ms)}, sync ${ms(r.sync_ms)}`),
    h("div", { class: "muted" }, `join phase ${ms(r.join_ms)} · sync phase ${ms(r.sync_ms)} · total ${ms(r.total_ms)} · leader ${memberLabel(r.leader)} · members ${r.members_after.length}`),
    changes.length ? h("ul", { class: "changes" }, changes) : h("div", { class: "muted" }, "no membership or assignment change"));
}

// A group's committed offsets, lag and owner per partition (classic and consumer groups).
function offsetRows(g, lagRule, lagCls) {
  return g.offsets.map((o) => h("tr", { "data-topic": o.topic, "data-partition": o.partition },
    h("td", null, o.topic), h("td", { class: "num" }, o.partition),
    h("td", { class: "num" }, num(o.committed)), h("td", { class: "num" }, num(o.high_watermark)),
    h("td", { class: lagCls(o.lag_level), title: lagRule }, num(o.lag)),
    h("td", null, o.owner ? memberLabel(g.members.find((m) => m.member_id === o.owner)) : "—")));
}

// How far one member of an epoch's target got, in words.
function progressText(m) {
  return {
    reconciled: `held its target ${ms(m.total_ms)} after the epoch began`,
    fenced: `fenced by the coordinator ${ms(m.total_ms)} after the epoch began, before holding its target`,
    left: `left ${ms(m.total_ms)} after the epoch began, before holding its target`,
    superseded: `a newer target came ${ms(m.total_ms)} after the epoch began, before it held this one`,
    reconciling: "on its way to its target",
  }[m.progress] || m.progress;
}

// One group epoch of a consumer group: when and why it began, its target assignment, and each
// member's way to its target as a bar on the axis all the page's epochs share (epochs_scale).
function epochItem(e) {
  const who = e.cause_member ? ` (${e.cause_member.client_id || e.cause_member.member_id}, ${e.cause_member.member_id})` : "";
  const partitions = e.members.reduce((n, m) => n + m.target_count, 0);
  const summary = e.target_ms === null
    ? "no target assignment: a newer epoch came first, or the next heartbeat computes it"
    : `target assignment computed ${ms(e.target_ms - e.at_ms)} after the epoch began: ` +
      `${e.members.length + e.members_omitted} members, ${partitions}${e.members_omitted ? "+" : ""} partitions` +
      (e.assignor ? `, by the ${e.assignor} assignor` : "");
  // The load assignor explains each partition it moved (load figures in bytes per second).
  const moves = (e.moves || []).length
    ? h("details", { class: "epoch-moves", open: e.cause === "load shifted" ? "" : null },
        h("summary", null, `${e.moves.length + e.moves_omitted} partition moves, explained`),
        h("ul", null, e.moves.map((m) => h("li", { class: "epoch-move" }, m))),
        e.moves_omitted ? h("div", { class: "muted" }, `and ${e.moves_omitted} more`) : null)
    : null;
  const rows = e.members.map((m) => h("li", { class: `member-bar ${m.progress}`, "data-member-id": m.member_id, "data-client-id": m.client_id, "data-progress": m.progress },
    h("div", null, h("span", { class: "client-id" }, m.client_id || m.member_id), " ",
      h("span", { class: `badge progress-${m.progress}` }, m.progress), " ",
      h("span", { class: "muted" }, progressText(m))),
    phaseBar(m.bar.wait_pct, m.bar.reconcile_pct, `waiting for the target ${ms(m.wait_ms)}, reconciling ${ms(m.reconcile_ms)}`),
    h("div", { class: "epoch-target muted" }, `target: ${m.target.length ? tps(m.target) : "no partitions"}` +
      (m.target_count > m.target.length ? ` … (${m.target_count} in all)` : ""))));
  return h("li", { class: e.status.replace(" ", "-"), "data-epoch": e.epoch, "data-status": e.status },
    h("div", null, h("span", { class: "gen-title" }, `epoch ${e.epoch}`), " ",
      h("span", { class: "badge" }, e.status), " ",
      h("span", { class: "muted epoch-cause" }, `${when(e.at_ms)} — ${e.cause}${who}`)),
    h("div", { class: "target-summary" }, summary),
    moves,
    rows.length ? h("ul", { class: "member-bars" }, rows) : null,
    e.members_omitted ? h("div", { class: "muted" }, `and ${e.members_omitted} more members, not kept`) : null);
}

// A KIP-848 consumer group (group.protocol=consumer): epochs, each member's reconciliation.
function consumerGroupPage(g) {
  const t = g.lag_thresholds;
  const lagRule = `amber from ${num(t.warn)} records of lag, red from ${num(t.high)}`;
  const lagCls = (level) => `num lag${level === "high" ? " lag-high" : level === "warn" ? " lag-warn" : ""}`;
  const members = g.members.map((m) => h("tr", { "data-member-id": m.member_id, "data-client-id": m.client_id, "data-member-state": m.member_state },
    h("td", { class: "mono" }, m.member_id),
    h("td", { class: "client-id" }, m.client_id),
    h("td", { class: "mono" }, m.client_host),
    h("td", { class: "num member-epoch" }, m.member_epoch),
    h("td", null, h("span", { class: "badge member-state" }, m.member_state)),
    h("td", { class: "assignment" }, tps(m.assignment), ` (${m.assignment.length})`),
    h("td", { class: "pending" }, m.pending_revocation.length ? tps(m.pending_revocation) : "—"),
    h("td", { class: "target" }, tps(m.target)),
    h("td", { class: "classic" }, m.classic_protocol ? "classic" : "consumer"),
    h("td", { class: lagCls(m.lag_level), title: lagRule }, num(m.lag_sum))));
  const offsets = offsetRows(g, lagRule, lagCls);
  const r = g.reconciliation;
  return [
    h("h2", null, "Consumer group ", h("span", { id: "group-id" }, g.group_id), " ",
      h("span", { class: `badge state-${g.state}`, id: "group-state" }, g.state)),
    h("div", { class: "summary" },
      h("div", null, h("b", { id: "group-epoch" }, g.group_epoch), "group epoch"),
      h("div", null, h("b", { id: "target-epoch" }, g.target_assignment_epoch), "target assignment epoch"),
      h("div", null, h("b", null, g.members.length), "members"),
      h("div", null, h("b", { id: "group-lag" }, num(g.lag_sum)), "lag (offsets)"),
      h("div", null, h("b", { id: "group-coordinator" }, g.coordinator), "coordinator node")),
    h("h3", null, "Members"),
    g.members.length ? table([["member id"], ["client id"], ["host"], ["member epoch", "num"], ["state"], ["assigned"], ["pending revocation"], ["target"], ["protocol"], ["lag", "num"]], members, { id: "members" })
      : h("p", { class: "muted" }, "No members."),
    h("h3", null, "Reconciliation"),
    h("div", { class: "summary", id: "reconciliation" },
      h("div", null, h("b", { id: "reconciliations" }, r.count), "reconciliations"),
      h("div", null, h("b", null, r.last_ms === null ? "—" : ms(r.last_ms)), "last"),
      h("div", null, h("b", null, r.mean_ms === null ? "—" : ms(Math.round(r.mean_ms))), "mean"),
      h("div", null, h("b", { id: "reconciling" }, r.in_progress ? `since ${when(r.since_ms)}` : "none"), "under way"),
      h("div", null, h("b", null, r.targets_computed), "target assignments computed")),
    h("h3", null, "Rebalance timeline"),
    h("div", { class: "legend" }, h("span", null, h("i", { class: "join" }), "waiting for the epoch's target assignment"),
      h("span", null, h("i", { class: "sync" }), "reconciling: until the member holds its target at the epoch"),
      h("span", { id: "epochs-scale" }, `bar length: ${g.epochs_scale.label}`)),
    h("p", { class: "muted", id: "epochs-source" },
      `Recorded in memory by the coordinator, node ${g.coordinator}, since it loaded the group at ${when(g.coordinator_since_ms)}; ` +
      `the last ${g.epochs_capacity} group epochs are kept, newest first. Each bar starts when the epoch began.`),
    g.epochs.length ? h("ol", { class: "timeline", id: "epochs" }, g.epochs.slice().reverse().map(epochItem))
      : h("p", { class: "muted" }, "No group epoch since this coordinator loaded the group."),
    h("h3", null, "Committed offsets and lag"),
    g.offsets.length ? table([["topic"], ["partition", "num"], ["committed", "num"], ["high watermark", "num"], ["lag", "num"], ["owner"]], offsets, { id: "lag" })
      : h("p", { class: "muted" }, "No committed offsets."),
    h("p", { class: "muted" }, "A KIP-848 group: the coordinator computes each member's target; a member reconciles " +
      "towards it through its heartbeats, giving up its pending partitions first." +
      (g.via_node !== undefined && g.via_node !== g.coordinator ? ` Read by node ${g.via_node} from node ${g.coordinator}'s console.` : "")),
  ];
}

function groupPage(g) {
  if (g.type === "consumer") return consumerGroupPage(g);
  // Lag is coloured by fixed thresholds the broker sends (view.rs: LAG_WARN, LAG_HIGH).
  const t = g.lag_thresholds;
  const lagRule = `amber from ${num(t.warn)} records of lag, red from ${num(t.high)}`;
  const lagCls = (level) => `num lag${level === "high" ? " lag-high" : level === "warn" ? " lag-warn" : ""}`;
  const members = g.members.map((m) => h("tr", { "data-member-id": m.member_id, "data-client-id": m.client_id },
    h("td", { class: "mono" }, m.member_id, m.member_id === g.leader ? h("span", { class: "badge" }, "leader") : null),
    h("td", { class: "client-id" }, m.client_id),
    h("td", { class: "mono" }, m.client_host),
    h("td", null, m.group_instance_id || "—"),
    h("td", { class: "assignment" }, m.assignment_error ? h("span", { class: "muted" }, m.assignment_error) : tps(m.assignment)),
    h("td", { class: "num" }, m.assignment.length),
    h("td", { class: lagCls(m.lag_level), title: lagRule }, num(m.lag_sum))));
  const offsets = offsetRows(g, lagRule, lagCls);
  const timeline = g.timeline.slice().reverse().map(timelineItem);
  return [
    h("h2", null, "Group ", h("span", { id: "group-id" }, g.group_id), " ",
      h("span", { class: `badge state-${g.state}`, id: "group-state" }, g.state)),
    h("div", { class: "summary" },
      h("div", null, h("b", { id: "group-generation" }, g.generation), "generation"),
      h("div", null, h("b", null, g.protocol_type ? `${g.protocol_type} / ${g.protocol || "—"}` : "—"), "protocol"),
      h("div", null, h("b", null, g.members.length), "members"),
      h("div", null, h("b", { id: "group-lag" }, num(g.lag_sum)), "lag (offsets)"),
      h("div", null, h("b", null, g.skew === null ? "—" : g.skew.toFixed(2)), "lag skew (max/mean per member)"),
      h("div", null, h("b", null, g.rebalances.generations), "rebalances"),
      h("div", null, h("b", { id: "group-coordinator" }, g.coordinator), "coordinator node")),
    g.actions && g.actions.enabled ? resetActions(g) : null,
    h("h3", null, "Members"),
    g.members.length ? table([["member id"], ["client id"], ["host"], ["instance id"], ["assignment"], ["partitions", "num"], ["lag", "num"]], members, { id: "members" })
      : h("p", { class: "muted" }, "No members."),
    h("h3", null, "Committed offsets and lag"),
    g.offsets.length ? table([["topic"], ["partition", "num"], ["committed", "num"], ["high watermark", "num"], ["lag", "num"], ["owner"]], offsets, { id: "lag" })
      : h("p", { class: "muted" }, "No committed offsets."),
    g.offsets.length ? h("p", { class: "legend", id: "lag-legend" }, h("span", null, h("i", { class: "lag-warn" }), `lag from ${num(t.warn)} records`),
      h("span", null, h("i", { class: "lag-high" }), `lag from ${num(t.high)} records`), h("span", null, "below: not coloured")) : null,
    h("h3", null, "Rebalance timeline"),
    h("div", { class: "legend" }, h("span", null, h("i", { class: "join" }), "join phase (PreparingRebalance)"),
      h("span", null, h("i", { class: "sync" }), "sync phase (CompletingRebalance)"),
      h("span", { id: "timeline-scale" }, `bar length: ${g.timeline_scale.label}`)),
    h("p", { class: "muted", id: "timeline-source" },
      `Recorded in memory by the coordinator, node ${g.coordinator}, since it loaded the group at ${when(g.coordinator_since_ms)}: ` +
      "the history starts there (when the coordinator moved to this node, or restarted) and is lost when it moves again. " +
      `The last ${g.timeline_capacity} rebalances are kept, newest first.`),
    timeline.length ? h("ol", { class: "timeline", id: "timeline" }, timeline)
      : h("p", { class: "muted" }, "No rebalance since this coordinator loaded the group."),
    h("p", { class: "muted" }, "Lag = high watermark − committed offset; the high watermark is the partition leader's " +
      "(asked of the leader by the coordinator, refreshed every few seconds; — while the leader does not answer)." +
      (g.via_node !== undefined && g.via_node !== g.coordinator ? ` Read by node ${g.via_node} from node ${g.coordinator}'s console.` : "")),
  ];
}

// ---- messages ------------------------------------------------------------------------------

// The query after "#/<page>?" in the URL.
function hashParams() {
  const i = location.hash.indexOf("?");
  return new URLSearchParams(i < 0 ? "" : location.hash.slice(i + 1));
}

function messagesHref(params) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") p.set(k, v);
  return `#/messages?${p.toString()}`;
}

// The browse parameters the Messages page keeps in its URL and passes to /ui/api/messages.
const BROWSE_KEYS = ["topic", "partition", "offset", "timestamp", "newest", "limit", "filter", "filter_on", "decode", "isolation"];

function browseParams() {
  const p = hashParams();
  const out = {};
  for (const k of BROWSE_KEYS) if (p.has(k)) out[k] = p.get(k);
  return out;
}

// The cluster (for the pickers), then the page of records when a topic is picked. A refusal of
// the records (a bad offset, no READ permission) is shown under the form, which stays usable.
async function loadMessages() {
  const cluster = await getJson("/ui/api/cluster");
  const params = browseParams();
  let messages = null;
  let error = null;
  if (params.topic !== undefined) {
    const qs = new URLSearchParams(params).toString();
    try { messages = await getJson(`/ui/api/messages?${qs}`); } catch (e) { error = e.message; }
  }
  return { node_id: cluster.node_id, via_node: messages?.via_node, cluster, params, messages, error };
}

function select(id, options, value) {
  return h("select", { id, name: id }, options.map(([v, label]) =>
    h("option", { value: v, selected: String(v) === String(value) }, label)));
}

function seekOf(params) {
  if (params.offset !== undefined) return ["offset", params.offset];
  if (params.timestamp !== undefined) return ["timestamp", params.timestamp];
  if (params.newest !== undefined) return ["newest", ""];
  return ["earliest", ""];
}

// A timestamp typed as milliseconds or as a date the browser parses (ISO 8601).
function timestampMs(text) {
  if (/^\d+$/.test(text.trim())) return text.trim();
  const t = Date.parse(text);
  return Number.isNaN(t) ? text : String(t);
}

function browseForm(d) {
  const p = d.params;
  const topics = d.cluster.topics;
  const topic = p.topic ?? (topics[0] && topics[0].name);
  const partitionsOf = (name) => (topics.find((t) => t.name === name)?.partitions || []).map((x) => [x.partition, x.partition]);
  const topicSel = select("topic", topics.map((t) => [t.name, t.internal ? `${t.name} (internal)` : t.name]), topic);
  const partSel = select("partition", partitionsOf(topic), p.partition ?? 0);
  topicSel.addEventListener("change", () => partSel.replaceChildren(...partitionsOf(topicSel.value).map(([v]) => h("option", { value: v }, v))));
  const [mode, value] = seekOf(p);
  const seekSel = select("seek", [["earliest", "from the start"], ["offset", "from offset"], ["timestamp", "from time"], ["newest", "newest"]], mode);
  const seekVal = h("input", { id: "seek-value", value, placeholder: "offset, or ms / 2026-01-31T12:00:00Z", size: 28 });
  const limit = h("input", { id: "limit", type: "number", min: 1, max: 500, value: p.limit ?? 50 });
  const filter = h("input", { id: "filter", type: "search", value: p.filter ?? "", placeholder: "substring", maxlength: 128 });
  const filterOn = select("filter_on", [["any", "key, value or header"], ["key", "key"], ["value", "value"], ["header", "header"]], p.filter_on ?? "any");
  const decode = select("decode", [["utf8", "UTF-8"], ["json", "JSON"], ["hex", "hex"]], p.decode ?? "utf8");
  const isolation = select("isolation", [["read_committed", "read_committed"], ["read_uncommitted", "read_uncommitted (aborted flagged)"]], p.isolation ?? "read_committed");
  const form = h("form", { id: "browse-form", class: "controls" },
    h("label", null, "topic ", topicSel), h("label", null, "partition ", partSel),
    h("label", null, "seek ", seekSel), seekVal, h("label", null, "limit ", limit),
    h("label", null, "filter ", filter), h("label", null, "in ", filterOn),
    h("label", null, "decode ", decode), h("label", null, "isolation ", isolation),
    h("button", { type: "submit" }, "Show"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const q = { topic: topicSel.value, partition: partSel.value, limit: limit.value, filter: filter.value,
      filter_on: filterOn.value, decode: decode.value, isolation: isolation.value };
    if (seekSel.value === "offset") q.offset = seekVal.value.trim();
    if (seekSel.value === "timestamp") q.timestamp = timestampMs(seekVal.value);
    if (seekSel.value === "newest") q.newest = "true";
    location.hash = messagesHref(q);
  });
  return form;
}

// A key, value or header value as the broker decoded it.
function field(v, cls) {
  if (v === null || v === undefined) return h("span", { class: "muted" }, "null");
  const note = [v.note, v.truncated ? `cut: ${num(v.bytes)} bytes in all` : null].filter(Boolean).join("; ");
  return h("span", { class: `field ${cls}`, "data-encoding": v.encoding, title: note || `${num(v.bytes)} bytes` },
    v.encoding === "json" ? h("pre", null, v.text) : v.text,
    v.truncated ? h("span", { class: "muted" }, " …") : null,
    v.note ? h("span", { class: "badge" }, v.encoding) : null);
}

function messageRow(r) {
  return h("tr", { "data-offset": r.offset, class: r.aborted ? "aborted" : null },
    h("td", { class: "num" }, r.offset),
    h("td", { class: "mono", title: r.timestamp_type }, when(r.timestamp)),
    h("td", { class: "key" }, field(r.key, "key")),
    h("td", { class: "headers" }, r.headers.length ? h("ul", null, r.headers.map((x) =>
      h("li", { "data-header": x.key }, h("b", null, x.key), ": ", field(x.value, "header-value")))) : "—"),
    h("td", { class: "value" }, field(r.value, "value")),
    h("td", null, r.aborted ? h("span", { class: "badge fenced" }, "aborted transaction") : null,
      r.transactional ? h("span", { class: "badge" }, "transactional") : null));
}

function pager(m, params) {
  const base = { ...params };
  delete base.offset; delete base.timestamp; delete base.newest;
  const prevStart = Math.max(m.log_start_offset, m.start_offset - m.limit);
  const prev = m.start_offset > m.log_start_offset
    ? h("a", { id: "page-prev", href: messagesHref({ ...base, offset: prevStart }) }, `← previous (from offset ${prevStart})`)
    : h("span", { class: "muted", id: "page-prev" }, "← previous");
  const next = m.more
    ? h("a", { id: "page-next", href: messagesHref({ ...base, offset: m.next_offset }) }, `next (from offset ${m.next_offset}) →`)
    : h("span", { class: "muted", id: "page-next" }, `next → (nothing readable past offset ${m.next_offset} yet)`);
  return h("div", { class: "pager" }, prev, " ", next);
}

function messagesResult(m, params) {
  const s = m.skipped;
  const stopped = { limit: "the page is full", "answer budget": "the page reached its size budget",
    "scan budget": "this read examined its budget of log bytes" }[m.stopped_by];
  return [
    h("p", { id: "browse-summary" },
      `${m.topic}-${m.partition} from offset ${m.start_offset}: ${m.records.length} record(s) shown` +
      (m.filter ? ` matching "${m.filter}" (${m.filter_on})` : "") +
      `; log start ${num(m.log_start_offset)}, high watermark ${num(m.high_watermark)}, last stable offset ${num(m.last_stable_offset)}; ` +
      `read ${m.isolation} up to ${num(m.end_offset)}` + (stopped ? `; stopped because ${stopped}.` : ".")),
    h("p", { class: "muted", id: "browse-skipped" },
      `Passed over: ${s.control_batches} transaction marker batch(es), ${s.aborted_records} record(s) of aborted transactions, ` +
      `${s.filtered_out} record(s) not matching the filter. Read from node ${m.leader}'s log` +
      (m.via_node !== undefined ? ` by node ${m.via_node}.` : ".")),
    pager(m, params),
    m.records.length ? table([["offset", "num"], ["timestamp"], ["key"], ["headers"], ["value"], [""]],
      m.records.map(messageRow), { id: "messages" }) : h("p", { class: "muted", id: "no-messages" }, "No records on this page."),
    pager(m, params),
  ];
}

function messagesPage(d) {
  const out = [h("h2", null, "Messages"), browseForm(d)];
  if (d.error) out.push(h("div", { class: "error-box", id: "browse-error" }, d.error));
  else if (d.messages) out.push(...messagesResult(d.messages, d.params));
  else out.push(h("p", { class: "muted" }, "Pick a topic and partition."));
  out.push(h("p", { class: "muted" }, "Records are read from the partition leader's log as a consumer's Fetch reads them: " +
    "read_committed stops at the last stable offset and leaves out aborted transactions; transaction markers are never shown. " +
    "This page does not refresh by itself: press Show."));
  return out;
}

// ---- charts --------------------------------------------------------------------------------

// Drawn here as SVG (no charting library): each chart spans the last hour the node keeps, its
// y axis from 0 to the largest value shown. Colours are SVG attributes, which the page's CSP
// allows (inline style attributes it would not).
const SVG_NS = "http://www.w3.org/2000/svg";
const PALETTE = ["#2957c4", "#e0a030", "#107c41", "#b42318", "#7a4cc2", "#0b8a94", "#c2410c", "#475467"];

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const c of children.flat()) if (c) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

// Short numbers for axis labels: 1.5k, 2.3M.
function shortNum(v) {
  const a = Math.abs(v);
  if (a >= 1e9) return `${(v / 1e9).toFixed(1)}G`;
  if (a >= 1e6) return `${(v / 1e6).toFixed(1)}M`;
  if (a >= 1e3) return `${(v / 1e3).toFixed(1)}k`;
  return a >= 10 || v === 0 ? String(Math.round(v)) : v.toFixed(2);
}

function chartSvg(c, now, windowMs) {
  const W = 640, H = 200, L = 48, R = 10, T = 10, B = 24;
  const x = (t) => L + ((t - (now - windowMs)) / windowMs) * (W - L - R);
  const values = c.series.flatMap((s) => s.points.map((p) => p[1]));
  const max = values.length ? Math.max(...values) : 0;
  const top = max > 0 ? max * 1.1 : 1;
  const y = (v) => T + (1 - v / top) * (H - T - B);
  const grid = [0, 0.5, 1].map((f) => {
    const v = top * f;
    return [svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#d9dde5" }),
      svg("text", { x: L - 4, y: y(v) + 4, "text-anchor": "end", "font-size": 10, fill: "#667085" }, shortNum(v))];
  });
  const ticks = [60, 45, 30, 15, 0].map((m) => svg("text", { x: x(now - m * 60000), y: H - 6, "text-anchor": "middle", "font-size": 10, fill: "#667085" },
    m ? `-${m} min` : "now"));
  const lines = c.series.map((s, i) => {
    const color = PALETTE[i % PALETTE.length];
    const pts = s.points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
    return s.points.length === 1
      ? svg("circle", { cx: x(s.points[0][0]), cy: y(s.points[0][1]), r: 2.5, fill: color, "data-series": s.name })
      : svg("polyline", { points: pts, fill: "none", stroke: color, "stroke-width": 1.5, "data-series": s.name });
  });
  return svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": c.title }, grid, ticks, lines);
}

function chartCard(c, d) {
  const legend = c.series.map((s, i) => {
    const last = s.points.length ? s.points[s.points.length - 1][1] : null;
    return h("li", { "data-series": s.name, "data-points": s.points.length },
      h("i", { class: `swatch c${i % PALETTE.length}` }), s.name, " ",
      h("span", { class: "muted" }, last === null ? "—" : `${shortNum(last)} ${c.unit}`));
  });
  return h("section", { class: "card chart", "data-chart": c.id },
    h("h3", null, c.title, " ", h("span", { class: "muted" }, `(${c.unit})`)),
    c.series.length ? chartSvg(c, d.now_ms, d.window_ms) : h("p", { class: "muted" }, "Nothing sampled yet."),
    legend.length ? h("ul", { class: "chart-legend" }, legend) : null,
    c.refused ? h("p", { class: "muted refused" }, `${c.refused} more series not kept (at most ${d.max_series} per chart).`) : null);
}

function chartsPage(d) {
  const node = d.node_id;
  const pick = h("div", { class: "controls", id: "chart-nodes" }, "Node: ",
    (d.brokers || []).map((id) => id === node ? h("b", null, `node ${id}`)
      : h("a", { href: `#/charts?node=${id}` }, `node ${id}`)));
  return [
    h("h2", null, "Charts of node ", h("span", { id: "charts-node" }, node)),
    pick,
    h("p", { class: "muted", id: "charts-source" },
      `What node ${node} saw in the last hour, sampled every ${d.sample_every_ms / 1000} s and kept in its memory ` +
      `(lost when it restarts): bytes in to the partitions it leads and out to consumers, the lag of the groups it ` +
      `coordinates and their time lag (the age of the oldest record they have not consumed, over the partitions node ${node} leads), its request latency (including time parked in purgatory, as Fetch's wait) and the ISR changes of the partitions it leads. ` +
      `At most ${d.max_series} series per chart.` + (d.last_sample_ms ? ` Last sample ${when(d.last_sample_ms)}.` : " No sample yet.") +
      (d.via_node !== undefined ? ` Read by node ${d.via_node} from node ${node}'s console.` : "")),
    d.charts.map((c) => chartCard(c, d)),
  ];
}

// ---- routing -------------------------------------------------------------------------------

// The Topics page: the cluster, and the configs of the open topics (at most MAX_OPEN_CONFIGS,
// each its own request).
const MAX_OPEN_CONFIGS = 10;
async function loadTopics() {
  const open = [...topicsState().open].slice(0, MAX_OPEN_CONFIGS);
  const [c, actions, ...configs] = await Promise.all([getJson("/ui/api/cluster"), actionsStatus(),
    ...open.map((t) => getJson(`/ui/api/topic-configs?topic=${encodeURIComponent(t)}`).catch((e) => ({ error: e.message })))]);
  c.topic_configs = Object.fromEntries(open.map((t, i) => [t, configs[i]]));
  c.actions = actions;
  return c;
}

function route() {
  const hash = location.hash || "#/brokers";
  const m = hash.match(/^#\/group\/(.*)$/);
  if (m) {
    let id;
    try { id = decodeURIComponent(m[1]); } catch { id = m[1]; }
    const load = async () => {
      const [g, actions] = await Promise.all([getJson(`/ui/api/group?id=${encodeURIComponent(id)}`), actionsStatus()]);
      g.actions = actions;
      return g;
    };
    return { page: "groups", load, render: groupPage };
  }
  const b = hash.match(/^#\/broker\/(\d+)$/);
  if (b) return { page: "brokers", api: `/ui/api/broker?id=${b[1]}`, render: brokerPage };
  if (hash === "#/topics" || hash.startsWith("#/topics?")) return { page: "topics", load: loadTopics, render: topicsPage };
  if (hash === "#/messages" || hash.startsWith("#/messages?")) return { page: "messages", load: loadMessages, render: messagesPage, auto: false };
  if (hash === "#/charts" || hash.startsWith("#/charts?")) {
    const n = hashParams().get("node");
    return { page: "charts", api: `/ui/api/charts${n && /^\d+$/.test(n) ? `?node=${n}` : ""}`, render: chartsPage };
  }
  if (hash === "#/groups") return { page: "groups", api: "/ui/api/groups", render: groupsPage };
  if (hash === "#/transactions") return { page: "transactions", api: "/ui/api/transactions", render: transactionsPage };
  return { page: "brokers", api: "/ui/api/cluster", render: brokersPage };
}

// `timed`: the periodic redraw, which waits while someone types in the page's controls.
async function refresh(timed) {
  clearTimeout(timer);
  const mine = ++generation;
  const r = route();
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("current", a.dataset.page === r.page);
  const main = document.getElementById("main");
  try {
    const data = r.load ? await r.load() : await getJson(r.api);
    if (mine !== generation) return;
    // Someone is typing in the page's controls: keep them, draw at the next tick.
    const typing = main.contains(document.activeElement) && document.activeElement.matches("input, select");
    if (timed && typing && main.dataset.page === r.page) {
      if (!document.hidden) timer = setTimeout(() => refresh(true), REFRESH_MS);
      return;
    }
    // replaceChildren would show a null as the text "null": drop the pages' absent parts (a
    // page may give a group of parts as an array).
    main.replaceChildren(...r.render(data).flat().filter((x) => x !== null && x !== undefined && x !== false));
    main.dataset.page = r.page;
    main.dataset.loaded = "true";
    if (r.page === "topics") applyTopicFilter();
    setStatus(`node ${data.via_node ?? data.node_id} · updated ${new Date().toLocaleTimeString("en-GB")}`);
  } catch (e) {
    if (mine !== generation) return;
    main.replaceChildren(h("div", { class: "error-box", id: "error" }, e.message));
    main.dataset.loaded = "error";
    setStatus("cannot reach the broker", true);
  }
  if (!document.hidden && r.auto !== false) timer = setTimeout(() => refresh(true), REFRESH_MS);
}

window.addEventListener("hashchange", () => refresh());
document.addEventListener("visibilitychange", () => { if (!document.hidden && route().auto !== false) refresh(true); });
refresh();
