// releasebot's coverage page: draws itself from the JSON API of the same server.
// Every text from the API goes through textContent (never innerHTML): feed, registry and
// cluster text is hostile. No framework, no build step, nothing from the internet.
//
// The refresh asks each address with the ETag of its last answer every 15 s: a 304 means
// nothing changed, and that part of the page is left alone (keyboard focus, a selection in
// a log, a scrolled table stay as they are). The server answers such a request from the
// store's change counters alone (one small read), so an open tab costs next to nothing;
// a tab in the background does not ask at all, and asks at once when it is shown again. A part whose answer changed is drawn again, and the
// focused cell or link is focused again by its key. The filter (state, search) lives in
// the address's query (?state=failed&q=4593), so a link keeps it; a target's detail in
// its hash (#/target/TAG).
"use strict";

const REFRESH_MS = 15000;
const SYMBOL = {
  published: "✓", verified: "✓", building: "⟳", retrying: "↻", waiting: "…",
  unknown: "?", stale: "↺", failed: "✗", incompatible: "⊘", refused: "⛔", missing: "○", "unknown-version": "✗",
  "foreign-repository": "↗",
};
const STATES = ["missing", "failed", "incompatible", "building", "retrying", "waiting",
  "stale", "unknown", "published"];
const SEARCH_MAX_CHARS = 128;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "onclick") node.addEventListener("click", value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function utc(iso) {
  const date = new Date(iso);
  return isNaN(date) ? String(iso) : date.toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

function local(iso) {
  const date = new Date(iso);
  if (isNaN(date)) return String(iso);
  return date.toLocaleString(undefined, {
    year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
  });
}

// A time in the reader's own zone, with UTC on hover; "never" when there is none.
function when(iso) {
  if (!iso) return "never";
  return el("time", { datetime: iso, title: utc(iso) }, local(iso));
}

function agoText(iso) {
  const seconds = Math.round((Date.now() - new Date(iso).getTime()) / 1000);
  return seconds < 0 ? local(iso) : duration(seconds) + " ago";
}

// "3 min ago", kept current by every refresh (updateAgo) without redrawing its table.
function ago(iso) {
  if (!iso) return "never";
  return el("time", { datetime: iso, title: utc(iso), "data-ago": iso }, agoText(iso));
}

function updateAgo() {
  for (const node of document.querySelectorAll("[data-ago]")) {
    const text = agoText(node.getAttribute("data-ago"));
    if (node.textContent !== text) node.textContent = text;
  }
  for (const node of document.querySelectorAll("[data-since]")) {
    const seconds = Math.round((Date.now() - new Date(node.getAttribute("data-since"))) / 1000);
    const text = duration(Math.max(0, seconds));
    if (node.textContent !== text) node.textContent = text;
  }
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "";
  if (seconds < 90) return seconds + " s";
  if (seconds < 5400) return Math.round(seconds / 60) + " min";
  if (seconds < 172800) return Math.round(seconds / 3600) + " h";
  return Math.round(seconds / 86400) + " days";
}

// kind "s": a target's state; "v": a node's verdict (both have a colour AND words).
function pill(value, words, kind) {
  const key = String(value);
  return el("span", { class: "pill " + (kind || "v") + "-" + key }, (SYMBOL[key] || "") + " " + (words || key));
}

function targetLink(tag, text) {
  return el("a", { href: "#/target/" + encodeURIComponent(tag), "data-key": "tag:" + tag }, text || tag);
}

// -- fetching: a 304 is "unchanged" ----------------------------------------------------------

const etags = new Map();
const bodies = new Map();

// ``{ body, changed }``: the answer, and whether it differs from the last one for ``url``
// (a 304 gives the last body back, unchanged).
async function getJson(url) {
  const headers = { Accept: "application/json" };
  if (etags.has(url)) headers["If-None-Match"] = etags.get(url);
  let answer;
  try {
    answer = await fetch(url, { headers, cache: "no-store" });
  } catch (error) {
    throw new Error("releasebot cannot be reached (" + error.message + ")");
  }
  if (answer.status === 304 && bodies.has(url)) return { body: bodies.get(url), changed: false };
  let body = null;
  try { body = await answer.json(); } catch (error) { body = null; }
  if (!answer.ok) {
    etags.delete(url);
    const why = body && typeof body.error === "string" ? body.error : "HTTP " + answer.status;
    const error = new Error(answer.status === 503 ? "Unavailable: " + why : why);
    error.status = answer.status;
    throw error;
  }
  const etag = answer.headers.get("ETag");
  if (etag) etags.set(url, etag); else etags.delete(url);
  bodies.set(url, body);
  return { body, changed: true };
}

function showProblem(text) {
  const box = document.getElementById("problem");
  box.hidden = !text;
  if (box.textContent !== (text || "")) box.textContent = text || "";
}

// Draw ``draw()`` into a part of the page; the element that had the focus inside it (a
// cell, a link: anything with data-key) has it again afterwards.
function redraw(container, draw) {
  const focused = document.activeElement;
  const key = focused && container.contains(focused) ? focused.getAttribute("data-key") : null;
  draw();
  if (key) {
    const again = Array.from(container.querySelectorAll("[data-key]"))
      .find((node) => node.getAttribute("data-key") === key);
    if (again) again.focus({ preventScroll: true });
  }
}

// -- the banner ---------------------------------------------------------------------------

function drawBanner(fleet) {
  const banner = document.getElementById("banner");
  const data = fleet.banner;
  // no GPU node seen (the fleet view off, or no listing yet): neither green nor red
  banner.className = "banner " + (!fleet.gpu_nodes ? "none" : data.covered ? "covered" : "uncovered");
  banner.replaceChildren();
  if (data.covered) {
    banner.append((fleet.gpu_nodes ? "✓ " : "") + data.text);
    return;
  }
  const total = fleet.gpu_nodes;
  banner.append(el("p", { class: "headline" }, "✗ " + data.uncovered_nodes + " of " + total +
    " GPU node" + (total === 1 ? "" : "s") + " not covered (on " + fleet.flatcar_versions +
    " Flatcar version" + (fleet.flatcar_versions === 1 ? "" : "s") + ")"));
  banner.append(el("ul", {}, data.uncovered.map((item) => {
    const count = item.nodes.length;
    const verb = item.pending ? "will reboot into" : count === 1 ? "runs" : "run";
    const images = item.tags.length ? "without its image" + (item.tags.length === 1 ? "" : "s")
      : "with no image planned (" + item.verdict + ")";
    return el("li", { "data-version": item.flatcar_version },
      count + " node" + (count === 1 ? " " : "s ") + verb + " Flatcar " + item.flatcar_version +
      " " + images + " since ", when(item.since), ": " + item.nodes.join(", "),
      item.tags.length ? el("ul", { class: "tags" }, item.tags.map((tag) => el("li", {},
        targetLink(tag.tag), " ", pill(tag.state, tag.words, "s"), " ", action(tag)))) : null);
  })));
  if (data.help) banner.append(el("p", { class: "help" }, "What each state means and what to do: ", data.help, "."));
}

// "/releasebot retry TAG" as code, so it is read (and copied) as the command it is.
function action(tag) {
  const command = "/releasebot retry " + tag.tag;
  const at = tag.action.indexOf(command);
  if (at < 0) return el("span", { class: "action" }, tag.action);
  return el("span", { class: "action" }, tag.action.slice(0, at), el("code", {}, command),
    tag.action.slice(at + command.length));
}

// -- the matrix and its filter --------------------------------------------------------------

function filterFromAddress() {
  const query = new URLSearchParams(location.search);
  const state = query.get("state") || "";
  return {
    state: STATES.includes(state) ? state : "",
    badState: state && !STATES.includes(state) ? state : null,
    q: (query.get("q") || "").slice(0, SEARCH_MAX_CHARS).trim(),
    flatcar: query.get("flatcar") || "",
    driver: query.get("driver") || "",
  };
}

function filterToAddress(filter) {
  const query = new URLSearchParams();
  if (filter.state) query.set("state", filter.state);
  if (filter.q) query.set("q", filter.q);
  if (filter.flatcar) query.set("flatcar", filter.flatcar);
  if (filter.driver) query.set("driver", filter.driver);
  const search = query.toString();
  history.replaceState(null, "", location.pathname + (search ? "?" + search : "") + location.hash);
}

function matrixUrl(filter) {
  const query = new URLSearchParams();
  if (filter.state) query.set("state", filter.state);
  if (filter.flatcar) query.set("flatcar", filter.flatcar);
  if (filter.driver) query.set("driver", filter.driver);
  const search = query.toString();
  return "/api/targets" + (search ? "?" + search : "");
}

function matches(text, q) {
  return !q || String(text).toLowerCase().includes(q.toLowerCase());
}

function drawMatrix(matrix, filter) {
  const table = document.getElementById("matrix");
  const q = filter.q;
  // a cell shows when its tag (driver and version inside) matches; a row when one of its
  // cells does or its version does; a driver's column when one of its cells does
  const rows = matrix.rows.map((row) => {
    const versionMatch = matches(row.flatcar_version, q);
    const cells = row.cells.map((cell, index) => cell && (versionMatch || matches(cell.tag, q) ||
      matches(matrix.drivers[index], q)) ? cell : null);
    return { row, cells, shown: versionMatch || cells.some(Boolean) };
  }).filter((item) => item.shown);
  const columns = matrix.drivers.map((driver, index) => !q || matches(driver, q) ||
    rows.some((item) => item.cells[index]));
  const counts = Object.entries(matrix.counts).filter(([, n]) => n > 0)
    .map(([state, n]) => n + " " + state);
  const drivers = matrix.drivers.filter((_, index) => columns[index]);
  const filtered = filter.state || q || filter.flatcar || filter.driver;
  document.getElementById("counts").textContent =
    (filtered ? "Showing " : "") + rows.length + " Flatcar version" + (rows.length === 1 ? "" : "s") +
    " × " + drivers.length + " driver" + (drivers.length === 1 ? "" : "s") +
    (filtered ? " (filtered)" : "") + (counts.length ? "; all images: " + counts.join(", ") : "");
  const head = el("tr", {}, el("th", { class: "version corner", scope: "col" }, "Flatcar"),
    drivers.map((driver) => el("th", { scope: "col", class: "driver" }, driver)));
  const body = rows.map(({ row, cells }) => {
    const meta = [row.channel || "no channel",
      row.released_at ? el("time", { datetime: row.released_at, title: utc(row.released_at) },
        new Date(row.released_at).toLocaleDateString()) : "no date"];
    const nodes = row.nodes_running + " running" + (row.nodes_pending ? ", " + row.nodes_pending + " rebooting into" : "");
    const header = el("th", { class: "version", scope: "row", "data-version": row.flatcar_version },
      row.flatcar_version,
      el("span", { class: "meta" }, meta[0], " · ", meta[1]),
      el("span", { class: "meta" }, nodes + (row.known ? "" : " · no feed lists it")));
    const shown = cells.filter((_, index) => columns[index]).map((cell, index) => {
      if (!cell) return el("td", {}, el("span", { class: "empty", title: "not planned" }, "–"));
      const after = cell.published_after_seconds;
      return el("td", {}, el("a", {
        class: "cell s-" + cell.state, href: "#/target/" + encodeURIComponent(cell.tag),
        "data-tag": cell.tag, "data-state": cell.state, "data-key": "cell:" + cell.tag,
        title: cell.tag + ": " + cell.words + " (" + drivers[index] + ")" +
          (cell.found_in_registry ? "; already in the registry when first seen" : ""),
      }, (SYMBOL[cell.state] || "") + " " + cell.words,
      after !== null ? el("span", { class: "when" }, "after " + duration(after)) : null));
    });
    return el("tr", {}, header, shown);
  });
  if (!matrix.rows.length && !filtered) {
    table.replaceChildren(el("tbody", {}, el("tr", {}, el("td", {}, "No target planned yet."))));
  } else if (!rows.length) {
    table.replaceChildren(el("tbody", {}, el("tr", {}, el("td", {}, "Nothing matches the filter."))));
  } else {
    table.replaceChildren(el("thead", {}, head), el("tbody", {}, body));
  }
}

function drawFilter(filter) {
  const state = document.getElementById("filter-state");
  if (!state.options.length) {
    state.append(el("option", { value: "" }, "every state"),
      ...STATES.map((name) => el("option", { value: name }, name)));
  }
  if (state.value !== filter.state) state.value = filter.state;
  const search = document.getElementById("filter-q");
  if (document.activeElement !== search && search.value !== filter.q) search.value = filter.q;
  const exact = [filter.flatcar && "Flatcar " + filter.flatcar, filter.driver && "driver " + filter.driver]
    .filter(Boolean);
  document.getElementById("filter-exact").textContent = exact.length ? "only " + exact.join(" and ") : "";
  document.getElementById("filter-clear").hidden = !(filter.state || filter.q || exact.length);
}

// -- nodes and feeds ----------------------------------------------------------------------

function drawFleet(fleet) {
  const table = document.getElementById("nodes");
  const head = el("tr", {}, el("th", {}, "Node"), el("th", {}, "Flatcar"),
    el("th", {}, "Image"), el("th", {}, "Next version"),
    fleet.gate ? el("th", {}, "Reboot gate") : null,
    el("th", { class: "wide" }, "Arch"), el("th", { class: "wide" }, "Seen"));
  const rows = fleet.nodes.map((node) => el("tr", { "data-node": node.name },
    el("td", {}, node.name), el("td", {}, node.flatcar_version),
    el("td", {}, pill(node.verdict)),
    el("td", {}, node.pending_version ? [node.pending_version + " ", pill(node.pending_verdict)] : "–"),
    fleet.gate ? el("td", {}, node.gate ? node.gate.text : "no reboot pending") : null,
    el("td", { class: "wide" }, node.arch), el("td", { class: "wide" }, ago(node.last_seen_at))));
  table.replaceChildren(el("thead", {}, head), el("tbody", {}, rows.length ? rows :
    el("tr", {}, el("td", { colspan: 5 }, "No GPU node seen (is the fleet view on?)"))));
  const ignored = document.getElementById("ignored");
  ignored.replaceChildren();
  if (fleet.ignored.length) {
    ignored.append(el("p", { class: "muted" }, "Ignored GPU nodes: ",
      fleet.ignored.map((node) => node.name + " (" + node.reason + ")").join("; ")));
  }
}

function drawFeeds(feeds) {
  const table = document.getElementById("feeds");
  const head = el("tr", {}, el("th", {}, "Feed"), el("th", {}, "Last poll"),
    el("th", {}, "Last change"), el("th", {}, "Last error"));
  const rows = feeds.feeds.map((feed) => el("tr", { "data-feed": feed.name },
    el("td", {}, feed.name), el("td", {}, ago(feed.last_polled_at)),
    el("td", {}, ago(feed.last_changed_at)),
    el("td", {}, feed.last_error ? [pill("failed", feed.consecutive_failures + " failing", "s"), " ",
      feed.last_error + " (", ago(feed.last_error_at), ")"] : "none")));
  table.replaceChildren(el("thead", {}, head), el("tbody", {}, rows));
}

// -- one target's detail ----------------------------------------------------------------------

function copyButton(text) {
  return el("button", { type: "button", "data-key": "copy", onclick: async (event) => {
    const button = event.currentTarget;
    try {
      await navigator.clipboard.writeText(text);
    } catch (error) {
      const field = el("textarea", {}, text);
      document.body.append(field);
      field.select();
      document.execCommand("copy");
      field.remove();
    }
    button.textContent = "Copied";
    setTimeout(() => { button.textContent = "Copy"; }, 1500);
  } }, "Copy");
}

// "started 2 Dec, 14:05, took 25 min" (or "running for 10 min"); times are the reader's.
function attemptTimes(attempt) {
  if (!attempt.started_at) return "";
  const parts = [" · started ", when(attempt.started_at)];
  const running = attempt.jobs.some((job) => job.state === "launching" || job.state === "running");
  if (attempt.duration_seconds !== null && attempt.duration_seconds !== undefined) {
    parts.push(", took " + duration(attempt.duration_seconds));
  } else if (running) {
    parts.push(", running for ", el("span", { "data-since": attempt.started_at },
      duration(Math.max(0, Math.round((Date.now() - new Date(attempt.started_at)) / 1000)))));
  }
  return el("span", { class: "times" }, parts);
}

let shownTag = null;

function detailTag() {
  const match = location.hash.match(/^#\/target\/(.+)$/);
  if (!match) return null;
  try { return decodeURIComponent(match[1]); } catch (error) { return match[1]; }
}

async function drawDetail() {
  const section = document.getElementById("detail");
  const tag = detailTag();
  if (tag === null) { section.hidden = true; shownTag = null; return; }
  const url = "/api/targets/" + encodeURIComponent(tag);
  const opening = tag !== shownTag;
  let answer;
  try {
    answer = await getJson(url);
  } catch (error) {
    section.hidden = false;
    shownTag = tag;
    document.getElementById("detail-title").textContent = tag;
    document.getElementById("detail-body").replaceChildren(el("p", {}, error.message));
    return;
  }
  if (!answer.changed && !opening) return; // unchanged: the log keeps its selection and scroll
  const detail = answer.body;
  section.hidden = false;
  const body = document.getElementById("detail-body");
  const logs = Array.from(body.querySelectorAll("pre.log"));
  const atEnd = logs.every((log) => log.scrollTop + log.clientHeight >= log.scrollHeight - 4);
  shownTag = tag;
  document.getElementById("detail-title").textContent = detail.tag;
  const published = detail.found_in_registry
    ? ["already in the registry when first seen (", when(detail.published_at), ")"]
    : [when(detail.published_at)];
  const facts = [
    ["State", pill(detail.state, detail.words, "s")],
    ["Driver", detail.driver_version + " (" + (detail.driver_branch || "?") + ")"],
    ["Flatcar", detail.flatcar_version + " (" + (detail.flatcar_channel || "?") + "), kernel " + (detail.kernel || "?")],
    ["Arches", detail.arches.join(", ")],
    ["Why", detail.reasons.length ? detail.reasons.join(", ") : "asked for by hand"],
    ["Pull", el("span", { class: "pull" }, el("code", { id: "pull" }, detail.pull), copyButton(detail.pull))],
    ["Digest", detail.digest ? el("code", {}, detail.digest) : "not known yet"],
    ["Signed", detail.signed ? "yes, key " + detail.key_fingerprint : "no"],
    ["Released", when(detail.released_at)],
    ["Published", published],
    ["Proven on a GPU", detail.proven_at ? ["on " + detail.proven_node + ", ", when(detail.proven_at)] : "not yet"],
    ["Attempts", [String(detail.attempts), detail.next_attempt_at ? [", next ", when(detail.next_attempt_at)] : null]],
  ];
  if (detail.last_error) facts.push(["Last error", detail.last_error]);
  if (detail.slack) facts.push(["Slack", el("a", { href: detail.slack, rel: "noreferrer", target: "_blank" }, "the build's message")]);
  const list = el("dl", { class: "facts" }, facts.map(([name, value]) => [el("dt", {}, name), el("dd", {}, value)]));
  const attempts = detail.builds.slice().reverse().map((attempt) => el("div", { class: "attempt" },
    el("h3", {}, "Attempt " + attempt.attempt, attemptTimes(attempt)),
    attempt.jobs.map((job) => el("div", { class: "job" },
      el("p", {}, el("code", {}, job.job_name), " ", job.arch, " ", pill(job.state === "succeeded" ? "published" : job.state === "failed" ? "failed" : "building", job.state, "s"),
        job.reason ? " reason: " + job.reason : "", job.message ? " — " + job.message : ""),
      job.log_tail ? el("pre", { class: "log", tabindex: 0 }, job.log_tail) : null))));
  redraw(section, () => body.replaceChildren(list,
    ...(attempts.length ? attempts : [el("p", { class: "muted" }, "No build yet.")])));
  // the error is at a log's end: open there (and stay there if the reader was there)
  if (opening || atEnd) {
    for (const log of body.querySelectorAll("pre.log")) log.scrollTop = log.scrollHeight;
  }
  if (opening) section.scrollIntoView({ block: "start" });
}

// -- the refresh ------------------------------------------------------------------------------

let filter = null;
let drawnView = null;

// One refresh at a time: the timer, the filter and a test may all ask at once; a request
// made while one runs makes one more run after it, and both callers wait for the end.
let running = null;
let queued = false;

function refresh() {
  if (running) { queued = true; return running; }
  running = (async () => {
    try {
      do { queued = false; await refreshOnce(); } while (queued);
    } finally {
      running = null;
    }
  })();
  return running;
}

async function refreshOnce() {
  filter = filterFromAddress();
  drawFilter(filter);
  try {
    if (filter.badState) {
      throw new Error("state " + JSON.stringify(filter.badState.slice(0, 40)) + " is not one of " +
        STATES.join(", ") + ": choose one in the filter");
    }
    const [fleet, matrix, feeds] = await Promise.all(
      [getJson("/api/fleet"), getJson(matrixUrl(filter)), getJson("/api/feeds")]);
    if (fleet.changed) {
      redraw(document.getElementById("banner"), () => drawBanner(fleet.body));
      redraw(document.getElementById("nodes"), () => drawFleet(fleet.body));
    }
    const view = JSON.stringify([filter.state, filter.q, filter.flatcar, filter.driver]);
    if (matrix.changed || view !== drawnView) {
      drawnView = view;
      redraw(document.getElementById("matrix"), () => drawMatrix(matrix.body, filter));
    }
    if (feeds.changed) redraw(document.getElementById("feeds"), () => drawFeeds(feeds.body));
    updateAgo();
    showProblem(null);
    const refreshed = document.getElementById("refreshed");
    refreshed.replaceChildren("Refreshed ", when(new Date().toISOString()), ".");
  } catch (error) {
    showProblem(error.message + " (shown as last known; retrying)");
    const banner = document.getElementById("banner");
    if (banner.classList.contains("unknown")) banner.textContent = "Coverage unknown";
  }
  if (detailTag() !== null || shownTag !== null) await drawDetail();
}

function setFilter(change) {
  filterToAddress({ ...filterFromAddress(), ...change });
  refresh();
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("detail-close").addEventListener("click", (event) => {
    event.preventDefault();
    history.replaceState(null, "", location.pathname + location.search);
    document.getElementById("detail").hidden = true;
    shownTag = null;
  });
  window.addEventListener("hashchange", () => { drawDetail(); });
  document.getElementById("filter-state").addEventListener("change", (event) => {
    setFilter({ state: event.target.value });
  });
  let typing = null;
  document.getElementById("filter-q").addEventListener("input", (event) => {
    clearTimeout(typing);
    typing = setTimeout(() => setFilter({ q: event.target.value.slice(0, SEARCH_MAX_CHARS).trim() }), 200);
  });
  document.getElementById("filter-clear").addEventListener("click", () => {
    document.getElementById("filter-q").value = "";
    setFilter({ state: "", q: "", flatcar: "", driver: "" });
  });
  refresh();
  // Nobody reads a hidden tab: no requests while hidden, one as soon as it is shown.
  setInterval(() => { if (!document.hidden) refresh(); }, REFRESH_MS);
  document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh(); });
});
