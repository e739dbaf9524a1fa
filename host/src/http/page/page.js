// The live status page: polls /status and draws it with DOM calls and textContent only, so that
// no lease name, holder id or plugin error can inject markup (and the Content-Security-Policy
// allows no inline script or style besides).
//
// - poll(): one fetch of /status every 500 ms; while the host does not answer, "reconnecting…"
//   and a back-off to 2 s, until it answers again;
// - render(): the header, the leases, the lease groups, the plugins and the processes;
// - sync(): keyed redraws, so that elements (an opened <details>, a text selection) survive polls;
// - leaseRow(), groupCard(), pluginCard(), processCard(): the DOM contract scripts and tests
//   read: #connection[data-state=live|reconnecting], [data-lease] row groups, [data-group],
//   [data-plugin] and [data-process] cards, and [data-field] cells inside them; in a lease, the last handoff
//   [data-field=last-handoff][data-reason] (and [data-field=vacant][data-reason] while nobody
//   holds it), and per recent term a [data-term=EPOCH][data-holder][data-end] row and a
//   [data-segment=EPOCH] in the timeline.
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

  // Makes `container` hold one element per item (after `after`, when given), in the items' order,
  // reusing the elements of `map` (key → { root, … }) and dropping those whose key is gone.
  function sync(container, map, items, keyOf, make, update, after) {
    const seen = new Set();
    let previous = after || null;
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

  // A duration or an age in milliseconds, or null when it is not a number.
  const millis = (x) => (typeof x === "number" && isFinite(x) ? Math.max(0, x) : null);

  // "850 ms", "4.2 s", "38 s", "6 min 12 s", "3 h 5 min", "2 d 4 h".
  function span(t) {
    const s = t / 1000;
    if (s < 1) return Math.round(t) + " ms";
    if (s < 60) return (s < 10 ? s.toFixed(1) : Math.floor(s)) + " s";
    const m = Math.floor(s / 60);
    if (m < 60) return m + " min " + Math.floor(s % 60) + " s";
    const h = Math.floor(m / 60);
    return h < 48 ? h + " h " + (m % 60) + " min" : Math.floor(h / 24) + " d " + (h % 24) + " h";
  }

  const ago = (t) => (millis(t) === null ? "at an unknown time" : span(millis(t)) + " ago");
  const str = (x) => (x == null ? NONE : String(x));

  // "512 B", "1.5 MiB".
  function bytes(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      i++;
    }
    return (i === 0 || n >= 100 ? Math.round(n) : n.toFixed(1)) + " " + units[i];
  }

  // ---- leases ----

  // How a term ended, in plain words: as the cause of a handoff, as why nobody holds the lease,
  // and in the list of terms.
  const ENDS = {
    released: ["released by its holder", "its holder released it", "released"],
    expired: ["taken over after its holder stopped renewing", "its holder stopped renewing", "expired"],
    forced: ["force-released by an operator", "an operator force-released it", "force-released"],
  };
  const ended = (reason, i) => (ENDS[reason] ? ENDS[reason][i] : str(reason));
  const endOf = (t) => (t.end == null ? "open" : String(t.end));

  // A lease's rows: the figures, its last handoff, its line, and (`history`, not for a group's
  // shards) its recent terms as a timeline and a list, folded when many.
  function leaseRow(name, history = true, folded = false) {
    const f = {
      role: el("span", { class: "role", "data-field": "role" }),
      holder: el("span", { class: "id", "data-field": "holder" }),
      here: el("span", { class: "tag", text: "this replica" }),
      epoch: el("td", { class: "num", "data-field": "epoch" }),
      fill: el("span", { class: "fill", "data-field": "time-left" }),
      left: el("span", { class: "secs", "data-field": "expires-in" }),
      vacant: el("p", { class: "vacant", "data-field": "vacant" }),
      handoff: el("p", { class: "handoff", "data-field": "last-handoff" }),
      line: el("p", { class: "line", "data-field": "line" }),
    };
    const cell = el("td", { colspan: "5" }, f.vacant, f.handoff, f.line);
    if (history) {
      f.track = el("div", { class: "track" });
      f.since = el("span", {});
      f.count = el("span", {});
      f.terms = el("tbody", {});
      const heads = ["epoch", "holder", "started", "ended", "held for", "how it ended"];
      cell.append(
        (f.timeline = el("div", { class: "timeline", "data-field": "timeline" }, f.track)),
        (f.axis = el("div", { class: "axis" }, f.since, el("span", { text: "now" }))),
        (f.list = el(
          "details",
          folded ? { class: "terms" } : { class: "terms", open: "" },
          el("summary", {}, "recent terms ", f.count),
          el(
            "table",
            { "data-field": "terms" },
            el("thead", {}, el("tr", {}, ...heads.map((text) => el("th", { text })))),
            f.terms,
          ),
        )),
      );
    }
    const more = el("tr", { class: "more" }, cell);
    const root = el(
      "tbody",
      { "data-lease": name },
      el(
        "tr",
        {},
        el("th", { scope: "row", class: "id", text: name }),
        el("td", {}, f.role),
        el("td", {}, f.holder, " ", f.here),
        f.epoch,
        el("td", { class: "left" }, el("span", { class: "bar" }, f.fill), f.left),
      ),
      more,
    );
    return { root, f, more, scale: 0, epoch: null, segments: new Map(), terms: new Map() };
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
    updateHistory(row, lease, me);
  }

  // The recent terms, newest first, one per epoch; none from a host whose /status has no terms.
  function termsOf(lease) {
    const byEpoch = new Map();
    for (const t of Array.isArray(lease.terms) ? lease.terms : []) {
      if (t && typeof t.epoch === "number" && !byEpoch.has(t.epoch)) byEpoch.set(t.epoch, t);
    }
    return [...byEpoch.values()].sort((a, b) => b.epoch - a.epoch);
  }

  // A term's start and end as ages (ms before the read); an open term ends now, at 0.
  const startOf = (t) => millis(t.started_ms_ago) || 0;
  const stopOf = (t) =>
    t.end == null ? 0 : Math.min(startOf(t), millis(t.ended_ms_ago) ?? startOf(t));

  function updateHistory(row, lease, me) {
    const { f } = row;
    const terms = termsOf(lease);

    // Its newest term ended and none came after: nobody holds it.
    const vacant = terms.length > 0 && terms[0].end != null ? terms[0] : null;
    f.vacant.hidden = !vacant;
    setData(f.vacant, "reason", vacant ? String(vacant.end) : "");
    setText(
      f.vacant,
      vacant
        ? "No holder since " + ago(vacant.ended_ms_ago) + ": " + ended(vacant.end, 1) +
            " (" + str(vacant.holder) + ", epoch " + vacant.epoch + ")."
        : "",
    );

    const h = lease.last_handoff && typeof lease.last_handoff === "object" ? lease.last_handoff : null;
    setData(f.handoff, "reason", h ? str(h.reason) : "none");
    setData(f.handoff, "from", h ? str(h.from) : "");
    setData(f.handoff, "to", h ? str(h.to) : "");
    setData(f.handoff, "toEpoch", h ? str(h.to_epoch) : "");
    let text = "No handoff recorded.";
    if (h) {
      text = "Last handoff " + ago(h.at_ms_ago) + ": " + str(h.from) + " (epoch " + str(h.from_epoch) +
        ") → " + str(h.to) + " (epoch " + str(h.to_epoch) + "), " + ended(h.reason, 0);
      // How long nobody held it in between, when the old term's end is on record.
      const old = terms.find((t) => t.epoch === h.from_epoch && t.end != null);
      const gap = old && millis(h.at_ms_ago) !== null ? stopOf(old) - millis(h.at_ms_ago) : 0;
      text += gap >= 1 ? "; unheld for " + span(gap) + "." : ".";
    }
    setText(f.handoff, text);

    // Who holds next.
    const line = Array.isArray(lease.line) ? lease.line : [];
    f.line.hidden = !line.length;
    setText(f.line, line.length ? "Next in line: " + line.slice(0, 3).map((w) =>
      str(w.holder) + " (priority " + str(w.priority) + ", " + span(millis(w.waited_ms) || 0) + ")").join(", ") +
      (line.length > 3 ? " +" + (line.length - 3) : "") : "");
    if (!f.track) {
      // A shard says nothing when there is nothing to say: a group has many.
      row.more.hidden = !h && !vacant && !line.length;
      return;
    }

    // From the oldest term's start to now, one segment per term.
    for (const node of [f.timeline, f.axis, f.list]) node.hidden = terms.length === 0;
    const reach = Math.max(1, ...terms.map(startOf));
    setText(f.since, span(reach) + " ago");
    setText(f.count, "(" + terms.length + ")");
    const key = (t) => String(t.epoch);
    const at = (age) => ((100 * (reach - age)) / reach).toFixed(2) + "%";
    const segment = () => ({ root: el("span", { class: "seg" }) });
    sync(f.track, row.segments, terms.slice().reverse(), key, segment, ({ root }, t) => {
      const holder = str(t.holder);
      setData(root, "segment", String(t.epoch));
      setData(root, "holder", holder);
      setData(root, "held", holder === me ? "here" : "elsewhere");
      setData(root, "end", endOf(t));
      paint(root, holder, me);
      root.style.left = at(startOf(t));
      // At least a sliver, so that a term of a few milliseconds still shows.
      root.style.width = Math.max(0.5, (100 * (startOf(t) - stopOf(t))) / reach).toFixed(2) + "%";
      setText(root, String(t.epoch));
      const title = "epoch " + t.epoch + ": " + holder + ", " + (t.end == null ? "holding" : ended(t.end, 2)) +
        " after " + span(startOf(t) - stopOf(t));
      if (root.title !== title) root.title = title;
    });
    sync(f.terms, row.terms, terms, key, termRow, (r, t) => {
      const holder = str(t.holder);
      setData(r.root, "term", String(t.epoch));
      setData(r.root, "holder", holder);
      setData(r.root, "end", endOf(t));
      setData(r.swatch, "held", holder === me ? "here" : "elsewhere");
      paint(r.swatch, holder, me);
      setText(r.holder, holder);
      r.here.hidden = holder !== me;
      const cells = [
        String(t.epoch),
        ago(t.started_ms_ago),
        t.end == null ? "holding" : ago(t.ended_ms_ago),
        span(startOf(t) - stopOf(t)),
        t.end == null ? NONE : ended(t.end, 2),
      ];
      cells.forEach((text, i) => setText(r.cells[i], text));
    });
  }

  // One row of a lease's terms list.
  function termRow() {
    const r = {
      swatch: el("span", { class: "swatch" }),
      holder: el("span", { class: "id" }),
      here: el("span", { class: "tag", text: "this replica" }),
      cells: [0, 1, 2, 3, 4].map((i) => el("td", i === 0 ? { class: "num" } : {})),
    };
    const [epoch, ...rest] = r.cells;
    r.root = el("tr", {}, epoch, el("td", {}, r.swatch, " ", r.holder, r.here), ...rest);
    return r;
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

  // ---- lease groups ----

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
      conflict: el("span", { class: "tag warn", "data-field": "count-conflict" }),
      held: dd("held"),
      target: dd("target"),
      shards: dd("shards"),
      members: dd("members"),
      moves: dd("moves"),
      handoffs: dd("handoffs"),
      takeovers: dd("takeovers"),
      map: el("div", { class: "shard-map", "data-field": "shard-map" }),
      owners: el("ul", { class: "owners", "data-field": "owners" }),
      head: leaseHead(),
    };
    f.table = el("table", { class: "leases" }, f.head);
    const root = el(
      "article",
      { class: "card group", "data-group": name },
      el("header", {}, el("h3", { class: "id", text: name }), f.member, f.gated, f.conflict),
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
      el("details", {}, el("summary", { text: "every shard" }), f.table),
    );
    return { root, f, cells: [], rows: new Map() };
  }

  function updateGroup(card, group, shards, me) {
    const { f } = card;
    setData(card.root, "gated", String(Boolean(group.gated)));
    setText(f.member, group.member ? "member" : "not a member yet");
    f.gated.hidden = !group.gated;
    const conflict = group.count_conflict;
    const others = Number(group.other_counts) || 0;
    f.conflict.hidden = conflict == null && others === 0;
    setText(
      f.conflict,
      conflict != null
        ? "configured with " + String(group.shards) + " shards; the group runs with " +
            String(conflict.shards) + " (" + String(conflict.member) + "'s)"
        : others + " member(s) with another shard count",
    );
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

    sync(
      f.table,
      card.rows,
      shards,
      (s) => s.lease.name,
      (name) => leaseRow(name, false),
      (row, s) => updateLease(row, s.lease, me),
      f.head,
    );
  }

  // ---- plugins ----

  function pluginCard(name) {
    const f = {
      state: el("span", { class: "state", "data-field": "state" }),
      lease: dd("lease"),
      world: dd("world"),
      calls: dd("calls"),
      errors: dd("errors"),
      traps: dd("traps"),
      forced: dd("forced-stops"),
      refused: dd("refused-writes"),
      lastCall: dd("last-call"),
      memory: dd("memory-high-water"),
      fuelLast: dd("fuel-last-call"),
      fuelPerCall: dd("fuel-per-call"),
      fuelTotal: dd("fuel-total"),
      error: el("p", { class: "error", "data-field": "last-error" }),
      warning: el("p", { class: "warning", "data-field": "warning" }),
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
        pair("errors returned", f.errors),
        pair("traps", f.traps),
        pair("stopped by force", f.forced),
        pair("refused writes", f.refused),
        pair("last call took", f.lastCall),
        pair("memory high water", f.memory),
        pair("fuel, last call", f.fuelLast),
        pair("fuel per call", f.fuelPerCall),
        pair("fuel, all calls", f.fuelTotal),
      ),
      f.warning,
      f.error,
    );
    return { root, f };
  }

  // Traps by kind and call durations beyond the last are in /metrics; the card shows /status.
  function updatePlugin(card, plugin) {
    const { f } = card;
    setData(card.root, "state", String(plugin.state));
    setText(f.state, String(plugin.state));
    setText(f.lease, plugin.lease == null ? NONE : String(plugin.lease));
    setText(f.world, plugin.world == null ? NONE : String(plugin.world));
    setText(f.calls, count(plugin.calls));
    setText(f.errors, count(plugin.errors));
    setText(f.traps, count(plugin.traps));
    setText(f.forced, count(plugin.forced_stops));
    setText(f.refused, count(plugin.refused_writes));
    const took = millis(plugin.last_call_ms);
    setText(f.lastCall, took === null ? NONE : took < 10 ? took.toFixed(2) + " ms" : span(took));
    // Zero until an instance has run on this replica: no figure rather than "0 B".
    const memory = plugin.memory_high_water_bytes;
    setText(f.memory, typeof memory === "number" && memory > 0 ? bytes(memory) : NONE);
    setText(f.fuelLast, count(plugin.fuel_last_call));
    // The mean over calls; instantiations burn fuel too, so it leans a little high.
    const metered = plugin.calls > 0 && plugin.fuel_total > 0;
    setText(f.fuelPerCall, count(metered ? Math.round(plugin.fuel_total / plugin.calls) : null));
    setText(f.fuelTotal, count(plugin.fuel_total));
    f.warning.hidden = plugin.warning == null;
    setText(f.warning, plugin.warning == null ? "" : "warning: " + plugin.warning);
    f.error.hidden = plugin.last_error == null;
    setText(f.error, plugin.last_error == null ? "" : "last error: " + plugin.last_error);
  }

  // ---- processes ----

  // One card per process and lease it runs under: a process bound to a group runs per shard.
  function processCard(key) {
    const f = {
      state: el("span", { class: "state", "data-field": "state" }),
      lease: dd("lease"),
      pid: dd("pid"),
      epoch: dd("epoch"),
      starts: dd("starts"),
      exits: dd("exits"),
      kills: dd("forced-kills"),
      keeperStops: dd("keeper-stops"),
      lastStop: dd("last-stop"),
      unconfirmed: dd("unconfirmed-stops"),
      lastExit: el("p", { class: "warning", "data-field": "last-exit" }),
    };
    const root = el(
      "article",
      { class: "card plugin", "data-process": key },
      el("header", {}, el("h3", { class: "id", "data-field": "name" }), f.state),
      el(
        "dl",
        { class: "stats" },
        pair("lease", f.lease),
        pair("pid", f.pid),
        pair("epoch", f.epoch),
        pair("starts", f.starts),
        pair("exits", f.exits),
        pair("killed by force", f.kills),
        pair("stopped by its keeper", f.keeperStops),
        pair("last stop took", f.lastStop),
        pair("unconfirmed stops", f.unconfirmed),
      ),
      f.lastExit,
    );
    return { root, f };
  }

  function updateProcess(card, p) {
    const { f } = card;
    setText(card.root.querySelector("h3"), String(p.name));
    setData(card.root, "state", String(p.state));
    setData(card.root, "kind", String(p.kind));
    setText(f.state, String(p.state));
    setText(f.lease, String(p.lease));
    setText(f.pid, p.pid == null ? NONE : String(p.pid));
    setText(f.epoch, p.epoch == null ? NONE : String(p.epoch));
    setText(f.starts, count(p.starts));
    const exits = p.exits && typeof p.exits === "object" ? Object.entries(p.exits) : [];
    setText(f.exits, exits.length === 0 ? NONE : exits.map(([how, n]) => how + ": " + count(n)).join(", "));
    setText(f.kills, count(p.forced_kills));
    setText(f.keeperStops, count(p.keeper_stops));
    const took = millis(p.last_stop_ms);
    setText(f.lastStop, took === null ? NONE : took < 10 ? took.toFixed(2) + " ms" : span(took));
    setText(f.unconfirmed, count(p.unconfirmed_stops));
    f.lastExit.hidden = p.last_exit == null;
    setText(f.lastExit, p.last_exit == null ? "" : "last exit: " + p.last_exit);
  }

  // ---- the page ----

  const leaseRows = new Map();
  const groupCards = new Map();
  const pluginCards = new Map();
  const processCards = new Map();

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
    const failing = s.lease_calls_failing;
    const callsFailing = byId("calls-failing");
    callsFailing.hidden = failing == null;
    setText(
      callsFailing,
      failing == null
        ? ""
        : "This replica cannot campaign: " + String(failing.op) + " failed " +
            String(failing.failures) + " time(s) in a row (" + String(failing.cause) + "): " +
            String(failing.error),
    );

    const leases = Array.isArray(s.leases) ? s.leases : [];
    const groups = Array.isArray(s.groups) ? s.groups : [];
    const plugins = Array.isArray(s.plugins) ? s.plugins : [];
    const processes = Array.isArray(s.processes) ? s.processes : [];

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
    const table = byId("leases-table");
    table.hidden = plain.length === 0;
    // Many leases: their lists of terms start folded, their timelines tell enough at a glance.
    const many = plain.length > 3;
    const row = (name) => leaseRow(name, true, many);
    sync(table, leaseRows, plain, (l) => String(l.name), row, (r, l) => updateLease(r, l, me), table.tHead);

    byId("groups-section").hidden = groups.length === 0;
    sync(byId("groups"), groupCards, groups, (g) => String(g.name), groupCard, (card, g) =>
      updateGroup(card, g, shards.get(String(g.name)), me),
    );

    byId("plugins-empty").hidden = plugins.length > 0;
    sync(byId("plugins"), pluginCards, plugins, (p) => String(p.name), pluginCard, updatePlugin);

    byId("processes-section").hidden = processes.length === 0;
    const processKey = (p) => String(p.name) + " " + String(p.lease);
    sync(byId("processes"), processCards, processes, processKey, processCard, updateProcess);
  }

  // ---- polling ----

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
