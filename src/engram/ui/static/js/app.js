// The router (hash URLs: every view is a deep link; an unknown one says so), the API key dialog and the keyboard
// shortcuts. In-page links (the skip link) move the focus without routing; Back and Forward bring back the pages a
// view appended ("Older commits") and its scroll position (kept in the history entry's state); a view that fails
// keeps its form, or offers the link's parameters to correct.
import { getAgent, getKey, loadSession, session, setAgent, setKey } from "./api.js";
import { errorBox, field, formValues, h, href, link } from "./dom.js";
import * as blame from "./blame.js";
import * as branches from "./branches.js";
import * as channels from "./channels.js";
import * as commit from "./commit.js";
import * as diff from "./diff.js";
import * as run from "./run.js";
import { takeNotice } from "./edit.js";
import * as search from "./search.js";
import * as state from "./state.js";
import * as timeline from "./timeline.js";

const VIEWS = { timeline, state, diff, blame, search, branches, channels, commit, run };
const TITLES = { timeline: "Timeline", state: "State", diff: "Diff", blame: "Blame", search: "Search",
  branches: "Branches and review", channels: "Channels", commit: "Commit", run: "Writer run" };
const HOME = "timeline";
const main = document.getElementById("view");
let rendering = 0;
let restoring = false; // Back/Forward is bringing pages back: these clicks are not the user's
let wantSearch = false; // "/" was pressed: focus the search field once the search view is drawn

/** The view a hash names: ``#/state?at=main`` -> {name: "state", params: {at: "main"}}; no hash is the timeline,
 * an unknown name the "unknown page" view. */
export function currentRoute() {
  const hash = window.location.hash.replace(/^#\/?/, "");
  const [path, query = ""] = hash.split("?");
  const params = Object.fromEntries(new URLSearchParams(query));
  if (!path) return { name: HOME, params, path };
  return { name: VIEWS[path] ? path : "unknown", params, path };
}

/** A hash that is no route (``#view``, the skip link's) names an element of the page, not a view. */
function anchorOf(hash) {
  if (!hash || hash === "#" || hash.startsWith("#/")) return null;
  return document.getElementById(decodeURIComponent(hash.slice(1)));
}

function jumpTo(target) {
  if (!target.hasAttribute("tabindex") && !target.matches("a[href], button, input, select, textarea")) target.setAttribute("tabindex", "-1");
  target.focus({ preventScroll: true });
  target.scrollIntoView({ block: "start" });
}

let routed = null; // the hash of the view on screen (put back when an in-page anchor is typed as a URL)

async function route() {
  const anchor = anchorOf(window.location.hash);
  if (anchor) {
    history.replaceState(history.state, "", routed || "#/" + HOME);
    if (routed !== null) { jumpTo(anchor); return; } // else the page opened on the anchor: draw the home view
  }
  routed = window.location.hash;
  const { name, params, path } = currentRoute();
  const turn = ++rendering;
  const saved = history.state || {}; // what this history entry showed: appended pages and the scroll position
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (a.dataset.nav === name || (name === "commit" && a.dataset.nav === "timeline")) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  main.setAttribute("aria-busy", "true");
  await loadSession({ refs: name === "branches" }); // the branches view shows the refs: always fresh there
  showWho();
  const out = h("div", { class: "view", "data-view": name });
  try {
    if (session.whoError) throw session.whoError;
    if (name === "unknown") unknownPage(out, path);
    else await VIEWS[name].render(out, params);
  } catch (error) {
    failed(out, name, params, error);
  }
  if (turn !== rendering) return; // a newer route started meanwhile
  const notice = takeNotice();
  if (notice) out.prepend(notice);
  main.replaceChildren(out);
  selected = -1;
  if (saved.pages > 1) await bringBackPages(saved.pages - 1, turn);
  if (turn !== rendering) return;
  window.scrollTo(0, saved.scrollY || 0);
  main.removeAttribute("aria-busy");
  document.title = `engram · ${name === "unknown" ? "unknown page" : name}`;
  document.body.dataset.ready = name; // tests and screen readers: the view has rendered
  if (wantSearch && name === "search") focusSearch();
  wantSearch = false;
}

function unknownPage(out, path) {
  out.append(h("h1", {}, "Unknown page"),
    h("p", { role: "alert", class: "notice", id: "unknown-page" }, `There is no view called “${path}” here: the link may be mistyped or from a newer version.`),
    h("p", {}, link(HOME, {}, "Go to the timeline", { class: "button", id: "go-home" })),
    h("p", {}, "Or open one of the views: ", Object.keys(TITLES).filter((v) => v !== "commit" && v !== "run").map((v, i) => [i ? " · " : "", link(v, {}, TITLES[v])])));
}

const LABELS = { at: "At (ref)", ns: "Namespace", key: "Key", q: "Query", id: "Commit", old: "Old", new: "New",
  ref: "Ref", branch: "Branch", compare: "Compare branch", filter: "Filter (JSON)", agent: "Agent", channel: "Channel" };

/** A view that failed: the error after the view's own form when it drew one, else after its heading with a form of
 * the link's parameters to correct (an unknown ref, a mistyped namespace) and open again. */
function failed(out, name, params, error) {
  const box = errorBox(error);
  const form = out.querySelector("form");
  const heading = out.querySelector("h1");
  if (form) form.after(box);
  else if (heading) heading.after(box);
  else out.prepend(h("h1", {}, TITLES[name] || name), box);
  const names = Object.keys(params);
  if (!form && names.length) {
    const fix = h("form", { class: "bar", id: "fix-link", "aria-label": "Correct the link" },
      names.map((n) => field(LABELS[n] || n, h("input", { name: n, value: params[n], size: Math.min(40, Math.max(12, params[n].length + 2)), autocomplete: "off" }))),
      h("button", { type: "submit", class: "primary" }, "Open"));
    fix.addEventListener("submit", (event) => {
      event.preventDefault();
      const values = Object.fromEntries(Object.entries(formValues(fix)).map(([k, v]) => [k, v.trim()]));
      go(href(name, values));
    });
    box.after(h("p", { class: "muted" }, "Correct the link and open it again:"), fix);
  }
  if (error.status === 401) out.append(h("p", {}, "This server needs an API key: ",
    h("button", { type: "button", onclick: openKeyDialog }, "Enter an API key")));
}

/** Go to ``hash`` (drawn again when it is already the current one). */
function go(hash) {
  keepScroll();
  if (window.location.hash === hash) route();
  else window.location.hash = hash;
}

/** Click the view's "more" link (``[data-next]`` that appends in place) ``count`` times, each after the last
 * page arrived: what this history entry showed before the user went on. */
async function bringBackPages(count, turn) {
  restoring = true;
  try {
    for (let i = 0; i < count && turn === rendering; i++) {
      const next = main.querySelector("[data-next]");
      const rows = main.querySelectorAll("[data-row]").length;
      if (!next) return;
      next.click();
      if (!next.hasAttribute("aria-disabled")) return; // not a link that appends in place
      const until = Date.now() + 20000;
      while (next.isConnected && next.hasAttribute("aria-disabled") && Date.now() < until) await new Promise((r) => setTimeout(r, 25));
      if (main.querySelectorAll("[data-row]").length === rows) return; // the page did not come (an error toast says why)
    }
  } finally {
    restoring = false;
  }
}

/** Remember something in the current history entry (its URL unchanged). */
function remember(patch) { history.replaceState({ ...(history.state || {}), ...patch }, ""); }

let scrollTimer = 0;
/** Save the scroll position now (before leaving the view). */
function keepScroll() {
  clearTimeout(scrollTimer);
  if (!restoring && !main.hasAttribute("aria-busy")) remember({ scrollY: Math.round(window.scrollY) });
}

function showWho() {
  const who = document.getElementById("who");
  if (!session.who) { who.textContent = getKey() ? "key refused" : "no key"; return; }
  const mode = session.who.scopes.includes("write") ? "read-write" : "read-only";
  who.textContent = `${session.who.local ? "local" : session.who.tenant} · ${mode}${getAgent() ? " · agent " + getAgent() : ""}`;
}

function openKeyDialog() {
  const dialog = document.getElementById("key-dialog");
  document.getElementById("key-input").value = getKey();
  document.getElementById("agent-input").value = getAgent();
  dialog.returnValue = "";
  dialog.showModal();
}

document.getElementById("key-button").addEventListener("click", openKeyDialog);
document.getElementById("help-button").addEventListener("click", () => document.getElementById("help-dialog").showModal());
document.getElementById("key-dialog").addEventListener("close", (event) => {
  if (event.target.returnValue !== "save") return;
  setKey(document.getElementById("key-input").value.trim());
  setAgent(document.getElementById("agent-input").value.trim());
  route();
});

// Keyboard: g+letter goes to a view, / searches at the point being viewed, j/k/Enter walk rows, n pages on.
const GO = { t: "timeline", s: "state", d: "diff", h: "blame", b: "branches", c: "channels" };
const NOT_TEXT = new Set(["checkbox", "radio", "range", "button", "submit", "reset", "color", "file", "image"]);
let pending = null;
let selected = -1;

/** Typing goes into this element (a text input, a text area, an editable element): no shortcut there. */
function typesText(el) {
  if (!(el instanceof HTMLElement)) return false;
  if (el.isContentEditable || el instanceof HTMLTextAreaElement) return true;
  return el instanceof HTMLInputElement && !NOT_TEXT.has(el.type);
}

/** Focus the search view's query field (and select its text, to type a new query). */
function focusSearch() {
  const input = main.querySelector("#search-query, [data-view='search'] input[name='q']");
  if (!input) return;
  input.focus();
  input.select();
}

document.addEventListener("keydown", (event) => {
  const target = event.target;
  if (event.ctrlKey || event.metaKey || event.altKey || document.querySelector("dialog[open]")) return;
  const key = event.key;
  if (key === "/" && !typesText(target)) { // wherever the focus is (a button, a checkbox, a row) but a text field
    event.preventDefault();
    const { name, params } = currentRoute();
    if (name === "search" && !main.hasAttribute("aria-busy")) focusSearch();
    else {
      wantSearch = true;
      go(`#/search${params.at ? "?at=" + encodeURIComponent(params.at) : ""}`);
    }
    return;
  }
  if (target instanceof HTMLElement && target.closest("input, textarea, select, [contenteditable]")) return;
  if (pending === "g" && GO[key]) {
    pending = null;
    go(`#/${GO[key]}`);
    event.preventDefault();
    return;
  }
  pending = key === "g" ? "g" : null;
  if (key === "?") document.getElementById("help-dialog").showModal();
  else if (key === "j" || key === "k") move(key === "j" ? 1 : -1);
  else if (key === "Enter" && selected >= 0) {
    const row = main.querySelectorAll("[data-row]")[selected];
    const open = row && row.querySelector("a[data-open], a");
    if (open) open.click();
  } else if (key === "n") {
    const next = main.querySelector("[data-next]");
    if (next) next.click();
  }
});

function move(step) {
  const rows = main.querySelectorAll("[data-row]");
  if (!rows.length) return;
  if (rows[selected]) rows[selected].classList.remove("selected");
  selected = Math.max(0, Math.min(rows.length - 1, selected + step));
  rows[selected].classList.add("selected");
  rows[selected].scrollIntoView({ block: "nearest" });
  const open = rows[selected].querySelector("a[data-open], a");
  if (open) open.focus({ preventScroll: true });
}

// Clicks: an in-page link (the skip link) moves the focus and leaves the route alone; a link to a view first saves
// this view's scroll position in its history entry; a "more" link that appended in place (its default prevented)
// counts the pages shown, for Back to bring them back.
let nextBusy = false;
document.addEventListener("click", (event) => {
  const a = event.target instanceof Element && event.target.closest("a[href^='#']");
  if (!a || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey || event.altKey) return;
  nextBusy = a.matches("[data-next]") && a.hasAttribute("aria-disabled"); // a click while a page is on its way
  const anchor = anchorOf(a.getAttribute("href"));
  if (anchor) {
    event.preventDefault();
    jumpTo(anchor);
  } else keepScroll();
}, true);
document.addEventListener("click", (event) => {
  const next = event.target instanceof Element && event.target.closest("[data-next]");
  if (next && event.defaultPrevented && !restoring && !nextBusy) remember({ pages: (history.state?.pages || 1) + 1 });
});
window.addEventListener("scroll", () => {
  clearTimeout(scrollTimer);
  scrollTimer = setTimeout(keepScroll, 150);
}, { passive: true });
window.addEventListener("pagehide", keepScroll);

/** Each table cell learns its column's heading (``data-label``): on a narrow screen, where rows are cards, the
 * stylesheet shows it before the cell's value. Appended rows are labelled as they come. */
function labelCells() {
  for (const td of main.querySelectorAll("table > tbody > tr > td:not([data-label])")) {
    const th = td.closest("table").querySelectorAll(":scope > thead > tr > th")[td.cellIndex];
    td.dataset.label = th ? th.textContent.trim() : "";
  }
}
new MutationObserver(labelCells).observe(main, { childList: true, subtree: true });

history.scrollRestoration = "manual"; // the router restores it, once the entry's pages are back
window.addEventListener("hashchange", () => {
  clearTimeout(scrollTimer); // a pending save belonged to the entry left
  route();
});
route();
