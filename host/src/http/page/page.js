// The live status page: polls /status and draws it with DOM calls and textContent only, so that
// no lease name, holder id or plugin error can inject markup (and the Content-Security-Policy
// allows no inline script or style besides).
//
// - poll(): one fetch of /status every 500 ms; while the host does not answer, "reconnecting…"
//   and a back-off to 2 s, until it answers again;
// - render(): the header, the leases, the lease groups and the plugins;
// - sync(): keyed redraws, so that elements (an opened <details>, a text selection) survive polls;
// - leaseRow(), groupCard(), pluginCard(): the DOM contract scripts and tests read:
//   #connection[data-state=live|reconnecting], [data-lease] rows, [data-group] and [data-plugin]
//   cards, and [data-field] cells inside them.
"use strict";

(() => {
  const POLL_MS = 500;
  const MAX_BACKOFF_MS = 2000;
  // A host that accepts the connection but hangs must not stall the loop.
  const TIMEOUT_MS = 2000;
  const NONE = "—";

  const byId = (id) => document.getElementById(id);

  // An element with attributes (`text` sets textContent) and children (strings become text).
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "text") node.textContent = value;
      else node.setAttribute(key, value);
    }
    for (const child of children) {
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }

  // Writes only on change: fewer repaints, and a selection inside stays put.
  function setText(node, text) {
    if (node.textContent !== text) node.textContent = text;
  }

  function setData(node, key, value) {
    if (node.dataset[key] !== value) node.dataset[key] = value;
  }

  // A term and its value, for the <dl class="stats"> of cards.
  function pair(label, value) {
    return el("div", {}, el("dt", { text: label }), value);
  }

  function dd(field) {
    return el("dd", { "data-field": field });
  }

  // Makes `container` hold one element per item, in the items' order, reusing the elements of
  // `map` (key → { root, … }) and dropping those whose key is gone.
  function sync(container, map, items, keyOf, make, update) {
    const seen = new Set();
    let previous = null;
    for (const item of items) {
      const key = keyOf(item);
      seen.add(key);
      let entry = map.get(key);
      if (!entry) {
        entry = make(key);
        map.set(key, entry);
      }
      update(entry, item);
      const wanted = previous ? previous.nextSibling : container.firstChild;
      if (entry.root !== wanted) container.insertBefore(entry.root, wanted);
      previous = entry.root;
    }
    for (const [key, entry] of map) {
      if (!seen.has(key)) {
        entry.root.remove();
        map.delete(key);
      }
    }
  }

  const count = (n) => (typeof n === "number" ? n.toLocaleString("en") : NONE);

  // ---- leases -------------------------------------------------------------------------------

  function leaseRow(name) {
    const f = {
      role: el("span", { class: "role", "data-field": "role" }),
      holder: el("span", { class: "id", "data-field": "holder" }),
      here: el("span", { class: "tag", text: "this replica" }),
      epoch: el("td", { class: "num", "data-field": "epoch" }),
      fill: el("span", { class: "fill", "data-field": "time-left" }),
      left: el("span", { class: "secs", "data-field": "expires-in" }),
    };
    const root = el(
      "tr",
      { "data-lease": name },
      el("th", { scope: "row", class: "id", text: name }),
      el("td", {}, f.role),
      el("td", {}, f.holder, " ", f.here),
      f.epoch,
      el("td", { class: "left" }, el("span", { class: "bar" }, f.fill), f.left),
    );
    return { root, f, scale: 0, epoch: null };
  }

  function updateLease(row, lease, me) {
    const { f } = row;
    const held = lease.holder == null ? "none" : lease.holder === me ? "here" : "elsewhere";
    setData(row.root, "role", String(lease.role));
    setData(row.root, "held", held);
    setText(f.role, String(lease.role));
    setText(f.holder, lease.holder == null ? NONE : String(lease.holder));
    f.here.hidden = held !== "here";
    setText(f.epoch, lease.epoch == null ? NONE : String(lease.epoch));
    const ms = typeof lease.expires_in_ms === "number" ? Math.max(0, lease.expires_in_ms) : null;
    // The bar measures the time left against the ttl. A host from before /status carried the
    // ttl: against the most seen for this term since the page opened (the holder renews every
    // ttl/3, which brings the time left back to about the ttl within a few polls).
    if (lease.epoch !== row.epoch) {
      row.epoch = lease.epoch;
      row.scale = 0;
    }
    if (typeof lease.ttl_ms === "number" && lease.ttl_ms > 0) row.scale = lease.ttl_ms;
    else if (ms !== null && ms > row.scale) row.scale = ms;
    const width = ms === null || row.scale === 0 ? 0 : Math.min(100, (100 * ms) / row.scale);
    f.fill.style.width = width.toFixed(1) + "%";
    setText(f.left, ms === null ? NONE : (ms / 1000).toFixed(1) + " s");
    // TODO(terms timeline): /status has no past terms, so neither when nor why the lease last
    // changed hands (release, expiry, forced release, rebalance). Draw each lease's recent terms
    // here once /status carries them; until then the page shows the current holder and epoch only.
  }

  function leaseHead() {
    return el(
      "thead",
      {},
      el(
        "tr",
        {},
        el("th", { text: "lease" }),
        el("th", { text: "this replica" }),
        el("th", { text: "holder" }),
        el("th", { text: "epoch" }),
        el("th", { text: "time left (database clock)" }),
      ),
    );
  }

  // ---- lease groups -------------------------------------------------------------------------

  // The shard `name` is of a group in `groups` (name → group), as `group/index`, or null.
  function shardOf(name, groups) {
    const at = name.lastIndexOf("/");
    if (at < 0) return null;
    const group = groups.get(name.slice(0, at));
    const rest = name.slice(at + 1);
    if (!group || !/^(0|[1-9][0-9]*)$/.test(rest)) return null;
    const index = Number(rest);
    return index < group.shards ? { group: group.name, index } : null;
  }

  // A stable colour per holder id, so the same replica looks the same in every group; never a
  // green, which marks this replica's own shards.
  function hue(id) {
    let h = 0;
    for (let i = 0; i < id.length; i++) h = (h * 31 + id.charCodeAt(i)) >>> 0;
    return (180 + (h % 240)) % 360;
  }

  function paint(node, holder, me) {
    const colour = holder == null || holder === me ? "" : "hsl(" + hue(holder) + " 45% 55%)";
    if (node.style.backgroundColor !== colour) node.style.backgroundColor = colour;
  }

  // "0–3, 7, 9–11" for [0, 1, 2, 3, 7, 9, 10, 11].
  function ranges(sorted) {
    const out = [];
    for (let i = 0; i < sorted.length; ) {
      let j = i;
      while (j + 1 < sorted.length && sorted[j + 1] === sorted[j] + 1) j++;
      out.push(i === j ? String(sorted[i]) : sorted[i] + "–" + sorted[j]);
      i = j + 1;
    }
    return out.join(", ");
  }

  function groupCard(name) {
    const f = {
      member: el("span", { class: "tag", "data-field": "member" }),
      gated: el("span", { class: "tag warn", "data-field": "gated", text: "gated" }),
      held: dd("held"),
      target: dd("target"),
      shards: dd("shards"),
      members: dd("members"),
      moves: dd("moves"),
      handoffs: dd("handoffs"),
      takeovers: dd("takeovers"),
      map: el("div", { class: "shard-map", "data-field": "shard-map" }),
      owners: el("ul", { class: "owners", "data-field": "owners" }),
      rows: el("tbody", {}),
    };
    const root = el(
      "article",
      { class: "card group", "data-group": name },
      el("header", {}, el("h3", { class: "id", text: name }), f.member, f.gated),
      el(
        "dl",
        { class: "stats" },
        pair("held here", f.held),
        pair("target", f.target),
        pair("shards", f.shards),
        pair("members", f.members),
        pair("moves", f.moves),
        pair("handoffs", f.handoffs),
        pair("takeovers", f.takeovers),
      ),
      f.map,
      f.owners,
      el(
        "details",
        {},
        el("summary", { text: "every shard" }),
        el("table", { class: "leases" }, leaseHead(), f.rows),
      ),
    );
    return { root, f, cells: [], rows: new Map() };
  }

  function updateGroup(card, group, shards, me) {
    const { f } = card;
    setData(card.root, "gated", String(Boolean(group.gated)));
    setText(f.member, group.member ? "member" : "not a member yet");
    f.gated.hidden = !group.gated;
    setText(f.held, count(group.held));
    setText(f.target, count(group.target));
    setText(f.shards, count(group.shards));
    setText(f.members, count(group.members));
    setText(f.moves, count(group.moves));
    setText(f.handoffs, count(group.handoffs));
    setText(f.takeovers, count(group.takeovers));

    // One cell per shard, coloured by its holder.
    const total = Math.max(0, Math.min(Number(group.shards) || 0, 10000));
    if (card.cells.length !== total) {
      card.cells = [];
      for (let i = 0; i < total; i++) card.cells.push(el("span", { class: "cell", "data-shard": String(i) }));
      f.map.replaceChildren(...card.cells);
    }
    const byIndex = new Map(shards.map((s) => [s.index, s.lease]));
    const owners = new Map();
    card.cells.forEach((cell, i) => {
      const lease = byIndex.get(i);
      const holder = lease ? lease.holder : null;
      setData(cell, "held", holder == null ? "none" : holder === me ? "here" : "elsewhere");
      const title = group.name + "/" + i + ": " + (holder == null ? "no holder" : holder);
      if (cell.title !== title) cell.title = title;
      paint(cell, holder, me);
      if (holder != null) {
        if (!owners.has(holder)) owners.set(holder, []);
        owners.get(holder).push(i);
      }
    });

    // Who holds which shards: rebuilt whole, it has one line per replica.
    const lines = [...owners.keys()].sort().map((holder) => {
      const swatch = el("span", { class: "swatch" });
      setData(swatch, "held", holder === me ? "here" : "elsewhere");
      paint(swatch, holder, me);
      const held = owners.get(holder);
      return el(
        "li",
        { "data-holder": holder },
        swatch,
        el("span", { class: "id", text: holder }),
        holder === me ? el("span", { class: "tag", text: "this replica" }) : "",
        el("span", { class: "count", text: held.length + (held.length === 1 ? " shard" : " shards") }),
        el("span", { class: "which", text: ranges(held) }),
      );
    });
    if (lines.length === 0) lines.push(el("li", { class: "empty", text: "no shard is held" }));
    f.owners.replaceChildren(...lines);

    sync(f.rows, card.rows, shards, (s) => s.lease.name, leaseRow, (row, s) => updateLease(row, s.lease, me));
  }

  // ---- plugins ------------------------------------------------------------------------------

  function pluginCard(name) {
    const f = {
      state: el("span", { class: "state", "data-field": "state" }),
      lease: dd("lease"),
      world: dd("world"),
      calls: dd("calls"),
      traps: dd("traps"),
      refused: dd("refused-writes"),
      fuelLast: dd("fuel-last-call"),
      fuelTotal: dd("fuel-total"),
      error: el("p", { class: "error", "data-field": "last-error" }),
    };
    const root = el(
      "article",
      { class: "card plugin", "data-plugin": name },
      el("header", {}, el("h3", { class: "id", text: name }), f.state),
      el(
        "dl",
        { class: "stats" },
        pair("lease", f.lease),
        pair("world", f.world),
        pair("calls", f.calls),
        pair("traps", f.traps),
        pair("refused writes", f.refused),
        pair("fuel, last call", f.fuelLast),
        pair("fuel, all calls", f.fuelTotal),
      ),
      f.error,
    );
    return { root, f };
  }

  // /status has no count of calls that returned an error, no traps by kind, and no memory high
  // water or call duration per plugin (/metrics has them): the card shows what /status has.
  function updatePlugin(card, plugin) {
    const { f } = card;
    setData(card.root, "state", String(plugin.state));
    setText(f.state, String(plugin.state));
    setText(f.lease, plugin.lease == null ? NONE : String(plugin.lease));
    setText(f.world, plugin.world == null ? NONE : String(plugin.world));
    setText(f.calls, count(plugin.calls));
    setText(f.traps, count(plugin.traps));
    setText(f.refused, count(plugin.refused_writes));
    setText(f.fuelLast, count(plugin.fuel_last_call));
    setText(f.fuelTotal, count(plugin.fuel_total));
    f.error.hidden = plugin.last_error == null;
    setText(f.error, plugin.last_error == null ? "" : "last error: " + plugin.last_error);
  }

  // ---- the page -----------------------------------------------------------------------------

  const leaseRows = new Map();
  const groupCards = new Map();
  const pluginCards = new Map();

  function render(s) {
    const me = String(s.replica);
    setText(byId("replica"), me);
    setText(byId("store"), String(s.store));
    const storeError = byId("store-error");
    storeError.hidden = s.store_error == null;
    setText(
      storeError,
      s.store_error == null
        ? ""
        : "The lease store could not be read (holders and epochs below are this replica's own " +
            "knowledge): " + s.store_error,
    );

    const leases = Array.isArray(s.leases) ? s.leases : [];
    const groups = Array.isArray(s.groups) ? s.groups : [];
    const plugins = Array.isArray(s.plugins) ? s.plugins : [];

    const groupsByName = new Map(groups.map((g) => [String(g.name), g]));
    const shards = new Map(groups.map((g) => [String(g.name), []]));
    const plain = [];
    for (const lease of leases) {
      const shard = shardOf(String(lease.name), groupsByName);
      if (shard) shards.get(shard.group).push({ index: shard.index, lease });
      else plain.push(lease);
    }
    // /status lists leases by name, where orders/10 comes before orders/2.
    for (const list of shards.values()) list.sort((a, b) => a.index - b.index);

    byId("leases-empty").hidden = plain.length > 0;
    setText(
      byId("leases-empty"),
      leases.length > 0 ? "no leases besides the shards of its lease groups" : "this replica campaigns for no leases",
    );
    byId("leases-table").hidden = plain.length === 0;
    sync(byId("leases"), leaseRows, plain, (l) => String(l.name), leaseRow, (row, l) => updateLease(row, l, me));

    byId("groups-section").hidden = groups.length === 0;
    sync(byId("groups"), groupCards, groups, (g) => String(g.name), groupCard, (card, g) =>
      updateGroup(card, g, shards.get(String(g.name)), me),
    );

    byId("plugins-empty").hidden = plugins.length > 0;
    sync(byId("plugins"), pluginCards, plugins, (p) => String(p.name), pluginCard, updatePlugin);
  }

  // ---- polling ------------------------------------------------------------------------------

  let lastAnswer = 0;

  function connection(state, text) {
    const node = byId("connection");
    setData(node, "state", state);
    setText(node, text);
    setData(document.documentElement, "connection", state);
  }

  async function fetchStatus() {
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), TIMEOUT_MS);
    try {
      const response = await fetch("/status", { cache: "no-store", signal: abort.signal });
      if (!response.ok) throw new Error("/status answered " + response.status);
      return await response.json();
    } finally {
      clearTimeout(timer);
    }
  }

  let delay = POLL_MS;

  async function poll() {
    let status = null;
    try {
      status = await fetchStatus();
    } catch (_) {
      // The host is restarting or gone: say so, keep the last picture, try again less often.
      const ago = lastAnswer ? " (last answer " + Math.round((Date.now() - lastAnswer) / 1000) + " s ago)" : "";
      connection("reconnecting", "reconnecting…" + ago);
      delay = Math.min(delay * 2, MAX_BACKOFF_MS);
    }
    if (status !== null) {
      lastAnswer = Date.now();
      delay = POLL_MS;
      connection("live", "live");
      setText(byId("updated"), "updated " + new Date(lastAnswer).toLocaleTimeString());
      try {
        render(status);
      } catch (e) {
        // A document this page does not understand must not stop the polling.
        console.error("leasehold: cannot draw /status", e);
      }
    }
    setTimeout(poll, delay);
  }

  poll();
})();
