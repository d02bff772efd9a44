// releasebot's coverage page: draws itself from the JSON API of the same server.
// Every text from the API goes through textContent (never innerHTML): feed, registry and
// cluster text is hostile. No framework, no build step, nothing from the internet.
"use strict";

const REFRESH_MS = 15000;
const SYMBOL = {
  published: "✓", verified: "✓", building: "⟳", retrying: "↻", waiting: "…",
  unknown: "?", stale: "↺", failed: "✗", incompatible: "⊘", refused: "⛔", missing: "○", "unknown-version": "✗",
  "foreign-repository": "↗",
};

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

function when(iso) {
  if (!iso) return "never";
  const date = new Date(iso);
  if (isNaN(date)) return String(iso);
  return date.toISOString().replace("T", " ").slice(0, 16) + " UTC";
}

function ago(iso) {
  if (!iso) return "never";
  const seconds = Math.round((Date.now() - new Date(iso).getTime()) / 1000);
  return seconds < 0 ? when(iso) : duration(seconds) + " ago";
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

async function getJson(url) {
  let answer;
  try {
    answer = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-cache" });
  } catch (error) {
    throw new Error("releasebot cannot be reached (" + error.message + ")");
  }
  let body = null;
  try { body = await answer.json(); } catch (error) { body = null; }
  if (!answer.ok) {
    const why = body && typeof body.error === "string" ? body.error : "HTTP " + answer.status;
    const error = new Error(answer.status === 503 ? "Unavailable: " + why : why);
    error.status = answer.status;
    throw error;
  }
  return body;
}

function showProblem(text) {
  const box = document.getElementById("problem");
  box.hidden = !text;
  box.textContent = text || "";
}

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
  banner.append("✗ " + fleet.gpu_nodes + " GPU nodes on " + fleet.flatcar_versions +
    " Flatcar versions: NOT covered");
  banner.append(el("ul", {}, data.uncovered.map((item) => el("li", {},
    item.nodes.length + " node" + (item.nodes.length === 1 ? " " : "s ") +
    (item.pending ? "will reboot into " : "run" + (item.nodes.length === 1 ? "s " : " ")) +
    "Flatcar " + item.flatcar_version + " without an image (" + item.verdict + ") since " +
    when(item.since) + ": " + item.nodes.join(", ")))));
}

function drawMatrix(matrix) {
  const table = document.getElementById("matrix");
  const counts = Object.entries(matrix.counts).filter(([, n]) => n > 0)
    .map(([state, n]) => n + " " + state);
  document.getElementById("counts").textContent =
    matrix.rows.length + " Flatcar versions × " + matrix.drivers.length + " drivers" +
    (counts.length ? ": " + counts.join(", ") : "");
  const head = el("tr", {}, el("th", { class: "version", scope: "col" }, "Flatcar"),
    matrix.drivers.map((driver) => el("th", { scope: "col" }, driver)));
  const rows = matrix.rows.map((row) => {
    const meta = [row.channel || "no channel", row.released_at ? when(row.released_at).slice(0, 10) : "no date"];
    const nodes = row.nodes_running + " running" + (row.nodes_pending ? ", " + row.nodes_pending + " rebooting into" : "");
    const header = el("th", { class: "version", scope: "row", "data-version": row.flatcar_version },
      row.flatcar_version,
      el("span", { class: "meta" }, meta.join(" · ")),
      el("span", { class: "meta" }, nodes + (row.known ? "" : " · no feed lists it")));
    const cells = row.cells.map((cell, index) => {
      if (!cell) return el("td", {}, el("span", { class: "empty", title: "not planned" }, "–"));
      const after = cell.published_after_seconds;
      return el("td", {}, el("a", {
        class: "cell s-" + cell.state, href: "#/target/" + encodeURIComponent(cell.tag),
        "data-tag": cell.tag, "data-state": cell.state,
        title: cell.tag + ": " + cell.words + " (" + matrix.drivers[index] + ")",
      }, (SYMBOL[cell.state] || "") + " " + cell.words,
      after !== null ? el("span", { class: "when" }, "after " + duration(after)) : null));
    });
    return el("tr", {}, header, cells);
  });
  table.replaceChildren(el("thead", {}, head), el("tbody", {}, rows));
  if (!matrix.rows.length) {
    table.replaceChildren(el("tbody", {}, el("tr", {}, el("td", {}, "No target planned yet."))));
  }
}

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
      feed.last_error + " (" + ago(feed.last_error_at) + ")"] : "none")));
  table.replaceChildren(el("thead", {}, head), el("tbody", {}, rows));
}

function copyButton(text) {
  return el("button", { type: "button", onclick: async (event) => {
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

async function drawDetail() {
  const section = document.getElementById("detail");
  const match = location.hash.match(/^#\/target\/(.+)$/);
  if (!match) { section.hidden = true; return; }
  const tag = decodeURIComponent(match[1]);
  let detail;
  try {
    detail = await getJson("/api/targets/" + encodeURIComponent(tag));
  } catch (error) {
    section.hidden = false;
    document.getElementById("detail-title").textContent = tag;
    document.getElementById("detail-body").replaceChildren(el("p", {}, error.message));
    return;
  }
  section.hidden = false;
  document.getElementById("detail-title").textContent = detail.tag;
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
    ["Published", when(detail.published_at)],
    ["Proven on a GPU", detail.proven_at ? "on " + detail.proven_node + ", " + when(detail.proven_at) : "not yet"],
    ["Attempts", String(detail.attempts) + (detail.next_attempt_at ? ", next " + when(detail.next_attempt_at) : "")],
  ];
  if (detail.last_error) facts.push(["Last error", detail.last_error]);
  if (detail.slack) facts.push(["Slack", el("a", { href: detail.slack, rel: "noreferrer", target: "_blank" }, "the build's message")]);
  const list = el("dl", { class: "facts" }, facts.map(([name, value]) => [el("dt", {}, name), el("dd", {}, value)]));
  const attempts = detail.builds.slice().reverse().map((attempt) => el("div", { class: "attempt" },
    el("h3", {}, "Attempt " + attempt.attempt),
    attempt.jobs.map((job) => el("div", { class: "job" },
      el("p", {}, el("code", {}, job.job_name), " ", job.arch, " ", pill(job.state === "succeeded" ? "published" : job.state === "failed" ? "failed" : "building", job.state, "s"),
        job.reason ? " reason: " + job.reason : "", job.message ? " — " + job.message : ""),
      job.log_tail ? el("pre", { class: "log" }, job.log_tail) : null))));
  document.getElementById("detail-body").replaceChildren(list,
    ...(attempts.length ? attempts : [el("p", { class: "muted" }, "No build yet.")]));
}

async function refresh() {
  try {
    const [fleet, matrix, feeds] = await Promise.all(
      [getJson("/api/fleet"), getJson("/api/targets"), getJson("/api/feeds")]);
    drawBanner(fleet);
    drawMatrix(matrix);
    drawFleet(fleet);
    drawFeeds(feeds);
    showProblem(null);
    document.getElementById("refreshed").textContent = "Refreshed " + when(new Date().toISOString()) + ".";
  } catch (error) {
    showProblem(error.message + " (shown as last known; retrying)");
    const banner = document.getElementById("banner");
    if (banner.classList.contains("unknown")) banner.textContent = "Coverage unknown";
  }
  if (location.hash.startsWith("#/target/")) await drawDetail();
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("detail-close").addEventListener("click", (event) => {
    event.preventDefault();
    history.replaceState(null, "", location.pathname);
    document.getElementById("detail").hidden = true;
  });
  window.addEventListener("hashchange", () => {
    drawDetail().then(() => {
      const section = document.getElementById("detail");
      if (!section.hidden) section.scrollIntoView({ block: "start" });
    });
  });
  refresh();
  setInterval(refresh, REFRESH_MS);
});
