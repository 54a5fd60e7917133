// The router (hash URLs: every view is a deep link), the API key dialog and the keyboard shortcuts.
import { getAgent, getKey, loadSession, session, setAgent, setKey } from "./api.js";
import { errorBox, h } from "./dom.js";
import * as blame from "./blame.js";
import * as branches from "./branches.js";
import * as channels from "./channels.js";
import * as commit from "./commit.js";
import * as diff from "./diff.js";
import * as run from "./run.js";
import * as search from "./search.js";
import * as state from "./state.js";
import * as timeline from "./timeline.js";

const VIEWS = { timeline, state, diff, blame, search, branches, channels, commit, run };
const main = document.getElementById("view");
let rendering = 0;

export function currentRoute() {
  const hash = window.location.hash.replace(/^#\/?/, "");
  const [name, query = ""] = hash.split("?");
  return { name: VIEWS[name] ? name : "timeline", params: Object.fromEntries(new URLSearchParams(query)) };
}

async function route() {
  const { name, params } = currentRoute();
  const turn = ++rendering;
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
    await VIEWS[name].render(out, params);
  } catch (error) {
    out.replaceChildren(errorBox(error));
    if (error.status === 401) out.append(h("p", {}, "This server needs an API key: ",
      h("button", { type: "button", onclick: openKeyDialog }, "Enter an API key")));
  }
  if (turn !== rendering) return; // a newer route started meanwhile
  main.replaceChildren(out);
  main.removeAttribute("aria-busy");
  selected = -1;
  document.title = `engram · ${name}`;
  document.body.dataset.ready = name; // tests and screen readers: the view has rendered
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
let pending = null;
let selected = -1;
document.addEventListener("keydown", (event) => {
  const target = event.target;
  if (event.ctrlKey || event.metaKey || event.altKey || document.querySelector("dialog[open]")) return;
  if (target instanceof HTMLElement && target.closest("input, textarea, select, [contenteditable]")) return;
  const key = event.key;
  if (pending === "g" && GO[key]) {
    pending = null;
    window.location.hash = `#/${GO[key]}`;
    event.preventDefault();
    return;
  }
  pending = key === "g" ? "g" : null;
  if (key === "?") document.getElementById("help-dialog").showModal();
  else if (key === "/") {
    event.preventDefault();
    const { params } = currentRoute();
    window.location.hash = `#/search${params.at ? "?at=" + encodeURIComponent(params.at) : ""}`;
  } else if (key === "j" || key === "k") move(key === "j" ? 1 : -1);
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

window.addEventListener("hashchange", route);
route();
