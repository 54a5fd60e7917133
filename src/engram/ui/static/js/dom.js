// Small helpers shared by the views: building DOM, formatting times and values, word-level text diffs.
import { canWrite } from "./api.js";

/** h("a", {href: "#/x", class: "c", onclick: fn}, "text", child, [more]) -> an element. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") el.addEventListener(name.slice(2), value);
    else if (name === "class") el.className = value;
    else if (name === "text") el.textContent = value;
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** A link to a view: link("state", {at: "main"}, "open"). Empty parameters are left out. */
export function href(view, params = {}) {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") query.set(name, value);
  }
  const text = query.toString();
  return `#/${view}${text ? "?" + text : ""}`;
}
export const link = (view, params, text, attrs = {}) => h("a", { href: href(view, params), ...attrs }, text);

const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
const absolute = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "short", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit",
  timeZoneName: "short",
});
const relative = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });

export function absTime(iso) { return absolute.format(new Date(iso)); }
export function relTime(iso) {
  const seconds = (new Date(iso).getTime() - Date.now()) / 1000;
  const steps = [[60, "second"], [60, "minute"], [24, "hour"], [7, "day"], [4.35, "week"], [12, "month"]];
  let value = seconds;
  for (const [size, unit] of steps) {
    if (Math.abs(value) < size) return relative.format(Math.round(value), unit);
    value /= size;
  }
  return relative.format(Math.round(value), "year");
}
/** <time>: relative, then absolute with the time zone (the ISO instant in datetime and title). */
export function timeEl(iso) {
  if (!iso) return h("span", { class: "muted" }, "—");
  return h("time", { datetime: iso, title: `${iso} (${zone})` }, relTime(iso), h("span", { class: "muted" }, ` · ${absTime(iso)}`));
}
export const zoneName = zone;

/** A datetime-local input's value ("2026-11-20T11:15") as an ISO instant (local time -> UTC). */
export function localToIso(value) { return value ? new Date(value).toISOString() : ""; }
/** An ISO instant as a datetime-local value in local time. */
export function isoToLocal(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

export const nsText = (labels) => (labels || []).join(".");
export const pretty = (value) => JSON.stringify(value, null, 2);
export const short = (id) => (id || "").slice(0, 10);
export const jsonBlock = (value) => h("pre", { class: "json" }, pretty(value));

/** A one-line preview of an item's value: its text field if it has one, else compact JSON. */
export function preview(value, max = 140) {
  const text = value && typeof value.text === "string" ? value.text : JSON.stringify(value);
  return text.length > max ? text.slice(0, max - 1) + "…" : text;
}

/** Word-level diff of two strings: a list of [op, text] with op "=", "-" or "+" (LCS over words and spaces). */
export function wordDiff(a, b) {
  const x = a.split(/(\s+)/).filter((t) => t !== "");
  const y = b.split(/(\s+)/).filter((t) => t !== "");
  if (x.length * y.length > 4_000_000) return [["-", a], ["+", b]];
  const n = x.length, m = y.length;
  const table = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      table[i][j] = x[i] === y[j] ? table[i + 1][j + 1] + 1 : Math.max(table[i + 1][j], table[i][j + 1]);
    }
  }
  const out = [];
  const push = (op, text) => {
    if (out.length && out[out.length - 1][0] === op) out[out.length - 1][1] += text;
    else out.push([op, text]);
  };
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) { push("=", x[i]); i++; j++; }
    else if (table[i + 1][j] >= table[i][j + 1]) push("-", x[i++]);
    else push("+", y[j++]);
  }
  while (i < n) push("-", x[i++]);
  while (j < m) push("+", y[j++]);
  return out;
}

/** The word diff as elements: <del> for removed words, <ins> for added ones. */
export function wordDiffEl(a, b) {
  return h("span", { class: "wdiff" }, wordDiff(a, b).map(([op, text]) =>
    op === "=" ? text : h(op === "-" ? "del" : "ins", { "aria-label": op === "-" ? "removed" : "added" }, text)));
}

/** String leaves of a JSON value by dotted path: {"text": "...", "meta.note": "..."}. */
export function textLeaves(value, prefix = "", out = {}) {
  if (typeof value === "string") out[prefix || "(value)"] = value;
  else if (value && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) textLeaves(v, prefix ? `${prefix}.${k}` : k, out);
  }
  return out;
}

export function errorBox(error) {
  const code = error && error.code ? ` (${error.code}${error.status ? ", HTTP " + error.status : ""})` : "";
  return h("div", { class: "error", role: "alert" }, `${error && error.message ? error.message : error}${code}`);
}

export function toast(message, kind = "ok") {
  const box = document.getElementById("toast");
  box.replaceChildren(h("div", { class: kind }, message));
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => box.replaceChildren(), 6000);
}

/** Ask before a write: resolves true when the user confirms. */
export function confirmDialog(title, body, okLabel = "Confirm") {
  const dialog = document.getElementById("confirm-dialog");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-body").replaceChildren(...[body].flat());
  document.getElementById("confirm-ok").textContent = okLabel;
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true }));
}

/** A button for a write action: shown only when the API key holds the write scope. */
export function writeButton(label, onclick, attrs = {}) {
  if (!canWrite()) return null;
  return h("button", { type: "button", onclick, ...attrs }, label);
}

/** A labelled form field. */
export function field(label, input) { return h("label", {}, label, input); }

/** A <select> of options ([value, text] or value), with one selected. */
export function select(name, options, selected, attrs = {}) {
  return h("select", { name, ...attrs }, options.map((o) => {
    const [value, text] = Array.isArray(o) ? o : [o, o];
    return h("option", { value, selected: value === selected }, text);
  }));
}

/** The conflicts of a refused merge or revert (the API's error details): each item with its base, ours and
 * theirs values; ``labels`` name the three sides for the action at hand. */
export function conflictList(details, labels) {
  const n = details.conflict_count;
  const side = (name, item) => h("div", { "data-side": name }, h("h4", {}, labels[name]), item ? jsonBlock(item.value) : "(absent)");
  return h("div", { class: "conflicts", id: "conflicts" }, h("h3", {}, `${n} conflict${n === 1 ? "" : "s"}`),
    h("ul", {}, details.conflicts.map((c) => h("li", { "data-conflict": `${nsText(c.namespace)}/${c.key}` },
      h("strong", {}, `${nsText(c.namespace)} / ${c.key}`),
      h("div", { class: "sides three" }, side("base", c.base), side("ours", c.ours), side("theirs", c.theirs))))),
    n > details.conflicts.length ? h("p", { class: "muted" }, `… and ${n - details.conflicts.length} more`) : null);
}

/** Author and message fields of a write made from the UI, sent with it: the author is prefilled with the key's
 * identity (``author`` of /v1/whoami), the message left to the API's default unless one is typed. */
export function provenanceFields(idPrefix, who, placeholder) {
  const author = h("input", { name: "author", id: `${idPrefix}-author`, size: 30, value: (who && who.author) || "", autocomplete: "off" });
  const message = h("input", { name: "message", id: `${idPrefix}-message`, size: 40, placeholder, autocomplete: "off" });
  return { author, message, fields: [field("Author", author), field("Message (optional)", message)],
    body: () => ({ author: author.value.trim() || undefined, message: message.value.trim() || undefined }) };
}

/** Read a form's fields into an object of strings. */
export const formValues = (form) => Object.fromEntries(new FormData(form).entries());
