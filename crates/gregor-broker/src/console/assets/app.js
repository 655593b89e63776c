// Gregor's read-only console. Plain DOM, no framework: every string from the broker goes into the
// page as text (textContent), never as HTML, since group, client and topic names are chosen by
// clients. Pages are selected by the URL fragment (#/brokers, #/topics, #/groups,
// #/group/<id>, #/transactions) and refreshed every REFRESH_MS from the JSON under /ui/api/.
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
      h("td", { class: "num" }, b.id),
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
      `node ${c.node_id} just now; partition counts cover the topics shown.`),
  ];
}

function topicsPage(c) {
  const out = [h("h2", null, "Topics")];
  if (!c.topics.length) out.push(h("p", { class: "muted" }, "No topics."));
  for (const t of c.topics) {
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
      h("td", { class: "num" }, num(p.size_bytes)),
      h("td", { class: "num" }, num(p.log_start_offset)),
      h("td", { class: "num" }, num(p.high_watermark)),
      h("td", { class: "num" }, num(p.log_end_offset)),
      h("td", { class: "num" }, num(p.last_stable_offset)),
      // Only where read_committed consumers are held back: a 0 would be noise on every row.
      h("td", { class: "num lso-lag" }, p.lso_lag ? h("span", { class: "lag-warn" }, num(p.lso_lag)) : "")));
    out.push(h("section", { class: "card", "data-topic": t.name },
      h("h3", null, t.name, " ", t.internal ? h("span", { class: "badge" }, "internal") : null,
        under ? h("span", { class: "badge under" }, `${under} under-replicated`) : null),
      table([["partition", "num"], ["leader", "num"], ["replicas"], ["isr"], [""], ["size (bytes)", "num"],
        ["start offset", "num"], ["high watermark", "num"], ["end offset", "num"],
        ["last stable offset", "num"], ["LSO lag", "num"]], rows)));
  }
  const unread = (c.sizes_unread || []).map((n) => `node ${n.node_id} (${n.error})`);
  out.push(h("p", { class: "muted", id: "sizes-source" },
    `Sizes and offsets are the partition leader's: node ${c.node_id}'s own replica when it leads, else read from the leader's console. ` +
    "— when the partition has no live leader" + (unread.length ? `, or its leader could not be read: ${unread.join("; ")}` : "") + ". " +
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
  const rows = g.groups.map((x) => h("tr", { "data-group": x.group_id, "data-coordinator": x.coordinator },
    h("td", null, h("a", { href: groupHref(x.group_id) }, x.group_id)),
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
      ? table([["group"], ["state"], ["protocol"], ["generation", "num"], ["members", "num"], ["lag", "num"], ["rebalances", "num"], ["coordinator", "num"]], rows, { id: "groups" })
      : h("p", { class: "muted" }, "No groups."),
    h("p", { class: "muted" }, g.scope === "cluster"
      ? `Groups of the whole cluster, each as its coordinator (the leader of its __consumer_offsets partition) reports it; ` +
        `read by node ${g.node_id} from every live broker's console.`
      : `Groups coordinated by node ${g.node_id} (the leader of their __consumer_offsets partition).`),
  ];
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
    h("div", { class: "bar", title: `join ${ms(r.join_ms)}, sync ${ms(r.sync_ms)}` },
      h("div", { class: "join", style: { width: `${joinW}%` } }), h("div", { class: "sync", style: { width: `${syncW}%` } })),
    h("div", { class: "muted" }, `join phase ${ms(r.join_ms)} · sync phase ${ms(r.sync_ms)} · total ${ms(r.total_ms)} · leader ${memberLabel(r.leader)} · members ${r.members_after.length}`),
    changes.length ? h("ul", { class: "changes" }, changes) : h("div", { class: "muted" }, "no membership or assignment change"));
}

function groupPage(g) {
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
  const offsets = g.offsets.map((o) => h("tr", { "data-topic": o.topic, "data-partition": o.partition },
    h("td", null, o.topic), h("td", { class: "num" }, o.partition),
    h("td", { class: "num" }, num(o.committed)), h("td", { class: "num" }, num(o.high_watermark)),
    h("td", { class: lagCls(o.lag_level), title: lagRule }, num(o.lag)),
    h("td", null, o.owner ? memberLabel(g.members.find((m) => m.member_id === o.owner)) : "—")));
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

// ---- routing -------------------------------------------------------------------------------

function route() {
  const hash = location.hash || "#/brokers";
  const m = hash.match(/^#\/group\/(.*)$/);
  if (m) {
    let id;
    try { id = decodeURIComponent(m[1]); } catch { id = m[1]; }
    return { page: "groups", api: `/ui/api/group?id=${encodeURIComponent(id)}`, render: groupPage };
  }
  if (hash === "#/topics") return { page: "topics", api: "/ui/api/cluster", render: topicsPage };
  if (hash === "#/groups") return { page: "groups", api: "/ui/api/groups", render: groupsPage };
  if (hash === "#/transactions") return { page: "transactions", api: "/ui/api/transactions", render: transactionsPage };
  return { page: "brokers", api: "/ui/api/cluster", render: brokersPage };
}

async function refresh() {
  clearTimeout(timer);
  const mine = ++generation;
  const r = route();
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("current", a.dataset.page === r.page);
  const main = document.getElementById("main");
  try {
    const data = await getJson(r.api);
    if (mine !== generation) return;
    // replaceChildren would show a null as the text "null": drop the pages' absent parts.
    main.replaceChildren(...r.render(data).filter((x) => x !== null && x !== undefined && x !== false));
    main.dataset.page = r.page;
    main.dataset.loaded = "true";
    setStatus(`node ${data.via_node ?? data.node_id} · updated ${new Date().toLocaleTimeString("en-GB")}`);
  } catch (e) {
    if (mine !== generation) return;
    main.replaceChildren(h("div", { class: "error-box", id: "error" }, e.message));
    main.dataset.loaded = "error";
    setStatus("cannot reach the broker", true);
  }
  if (!document.hidden) timer = setTimeout(refresh, REFRESH_MS);
}

window.addEventListener("hashchange", refresh);
document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh(); });
refresh();
